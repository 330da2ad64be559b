"""`buildkit bench`: measuring a llama-server."""
