"""Local tags (issue 14): every build keeps a build-key tag of its own, and a bench never compares an
image with itself."""

from __future__ import annotations

import uuid

import docker
import pytest
from click.testing import CliRunner

from buildkit.cli.main import main

pytestmark = pytest.mark.docker


def test_bench_refuses_to_compare_an_image_with_itself(tmp_path, debian_base_image):
    client = docker.from_env()
    image = client.images.get(debian_base_image)
    repo = f"buildkit-test/r14a-same-{uuid.uuid4().hex[:8]}"
    image.tag(repo, "a")
    image.tag(repo, "b")
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    try:
        result = CliRunner().invoke(main, ["bench", "--image", f"{repo}:a", "--compare-image", f"{repo}:b",
                                           "--model", str(model)], catch_exceptions=False)
    finally:
        for tag in ("a", "b"):
            client.images.remove(f"{repo}:{tag}", noprune=True)
    assert result.exit_code == 1
    assert result.stderr.strip().startswith(f"error: --image {repo}:a and --compare-image {repo}:b are the same image")
