"""The lock, versions, publishing and promotion."""
