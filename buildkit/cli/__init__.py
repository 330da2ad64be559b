"""The `buildkit` command line, one module per command."""
