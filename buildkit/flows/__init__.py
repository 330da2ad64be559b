"""Stages wired together: the build pipeline, nightly, reproduce, the CI workflow, doctor."""
