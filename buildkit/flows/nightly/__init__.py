"""The nightly: on one machine, and as CI runs it (plan, one job per unit, assemble), its summary, its workflow."""
