"""Many units at once: the matrix bake, and one OCI index over a multi-platform variant's platforms."""
