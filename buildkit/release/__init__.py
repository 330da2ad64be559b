"""The lock, tag names, versions and publishing."""
