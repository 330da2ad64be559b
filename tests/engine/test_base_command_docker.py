"""`buildkit base debian` (flows/debianbase.py), run as the README's offline section shows it, in its cheap
one-platform form: debootstrap of Debian 12 from the machine's own Debian mirror, no registry, the image loaded
into the real engine. The two-platform form is what the cross tests' bases use (tests/images.py: the native
image this command makes, and buildkit's unpacked arm64 root and index writer)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from buildkit.core.errors import BaseImageError
from buildkit.engine.baseimages import check_base_platforms, resolve_base_images
from cliutil import buildkit_env

TAG = f"buildkit-test/base-command:bookworm-{os.getpid()}"


@pytest.mark.docker
def test_base_debian_makes_a_bookworm_image_from_debians_packages(docker_engine, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "buildkit.cli", "base", "debian", "--suite", "bookworm",
                           "--platform", "linux/amd64", "--tag", TAG], env=buildkit_env(), capture_output=True,
                          text=True, timeout=1200)
    try:
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stdout.startswith(f"{TAG}: Debian bookworm, linux/amd64 (configured), sha256:"), proc.stdout
        digest = proc.stdout.split()[-1]
        info = json.loads(subprocess.run(["docker", "image", "inspect", TAG], capture_output=True, text=True,
                                         check=True).stdout)[0]
        assert info["Id"] == digest  # the containerd store's id is the manifest buildkit wrote
        assert (info["Architecture"], info["Os"]) == ("amd64", "linux") and info["Config"]["Cmd"] == ["bash"]
        # a configured Debian 12: apt and dpkg work in it, apt's lists are empty (as in Debian's images)
        script = ". /etc/os-release; echo $VERSION_CODENAME; dpkg-query -W -f='${Status}\\n' apt; " \
                 "ls /var/lib/apt/lists | grep -c _Packages || true; apt-get --version | head -1"
        run = subprocess.run(["docker", "run", "--rm", "--network", "none", TAG, "sh", "-c", script],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        codename, status, lists, apt = run.stdout.splitlines()
        assert (codename, status, lists) == ("bookworm", "install ok installed", "0") and apt.startswith("apt ")
        # what a build does with a base in the engine only: read by content, platforms checked
        sources = resolve_base_images([TAG], tmp_path / "cache", ask_registry=False)
        check_base_platforms(sources, ("linux/amd64",), "test")
        with pytest.raises(BaseImageError, match="linux/arm64"):
            check_base_platforms(sources, ("linux/arm64",), "a cross build's target")
    finally:
        subprocess.run(["docker", "image", "rm", TAG], capture_output=True)
