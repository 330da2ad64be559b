"""Running an image's files on a GPU host without Docker (scripts/gpu_run.py)."""
