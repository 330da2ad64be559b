"""Planning (pure): the arch catalogue, CPU levels, config and its schema, profiles, the matrix, the build plan,
the inputs model and its key, tag names, rendering."""
