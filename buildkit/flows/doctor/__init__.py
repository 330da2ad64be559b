"""`buildkit doctor`: is this machine ready for the build it is configured for; one module per check."""
