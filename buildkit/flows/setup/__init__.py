"""Setting up: a starting project (`buildkit init`), a Debian base image made here (`buildkit base debian`)."""
