"""Everything that talks to the container engine and BuildKit."""
