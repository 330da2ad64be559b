"""Planning (pure): the arch catalogue, CPU levels, config, profiles, the build plan, its key, rendering."""
