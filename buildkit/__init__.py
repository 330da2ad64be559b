"""llama-buildkit: pinned llama.cpp fork commits into tested, tagged container images, one CUDA arch at a time."""

__version__ = "0.3.0"
