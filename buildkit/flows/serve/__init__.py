"""Serving an image: the container `bench --image` starts, and the Olares Application Chart of `run`."""
