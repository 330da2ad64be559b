"""Checks on a built image: binaries, instructions, libraries."""
