"""`buildkit base debian` (flows/setup/debianbase.py), run as the README's offline section shows it, in its cheap
one-platform form: debootstrap of Debian 12 from the machine's own Debian mirror, no registry, the image loaded
into the real engine. The session's Debian base is made by that command (tests/images.py ensure_debian_image,
on an engine that lacks it: every CI run), so this test checks that image rather than spending another
debootstrap (90 to 130 s here) on a second one. The two-platform form is what the cross tests' bases use
(tests/images.py: the native image this command makes, and buildkit's unpacked arm64 root and index writer)."""

from __future__ import annotations

import json
import subprocess

import docker
import pytest

from buildkit.core.errors import BaseImageError
from buildkit.engine.current import get_engine
from buildkit.engine.baseimages import check_base_history, check_base_platforms, resolve_base_images


@pytest.mark.docker
def test_base_debian_makes_a_bookworm_image_from_debians_packages(debian_base_image, tmp_path):
    tag = debian_base_image  # made by `buildkit base debian` (tests/images.py)
    info = json.loads(subprocess.run(["docker", "image", "inspect", tag], capture_output=True, text=True,
                                     check=True).stdout)[0]
    assert (info["Architecture"], info["Os"]) == ("amd64", "linux") and info["Config"]["Cmd"] == ["bash"]
    # a configured Debian 12: apt and dpkg work in it, apt's lists are empty (as in Debian's images)
    script = ". /etc/os-release; echo $VERSION_CODENAME; dpkg-query -W -f='${Status}\\n' apt; " \
             "ls /var/lib/apt/lists | grep -c _Packages || true; apt-get --version | head -1"
    run = subprocess.run(["docker", "run", "--rm", "--network", "none", tag, "sh", "-c", script],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    codename, status, lists, apt = run.stdout.splitlines()
    assert (codename, status, lists) == ("bookworm", "install ok installed", "0") and apt.startswith("apt ")
    # what a build does with a base in the engine only: read by content, platforms checked
    sources = resolve_base_images([tag], tmp_path / "cache", ask_registry=False, engine=get_engine())
    check_base_platforms(sources, ("linux/amd64",), "test")
    # dated by its suite's Release file, not by the run (issue 47): every history entry has that one time
    check_base_history(sources)
    history = docker.from_env().api.history(tag)
    assert [h["Created"] for h in history] == [history[0]["Created"]] and history[0]["Created"] > 0
    with pytest.raises(BaseImageError, match="linux/arm64"):
        check_base_platforms(sources, ("linux/arm64",), "a cross build's target")


@pytest.mark.docker
def test_a_run_killed_mid_debootstrap_leaves_a_folder_the_next_run_sweeps(docker_engine, tmp_path):
    """issue 48: `kill -9` of buildkit and its debootstrap left a buildkit-base-* folder (207 MiB) in the
    temporary folder for good. The next `base debian` sweeps it first (its pid gone, its flock free), its
    mounts undone, whatever that run then does (here: a mirror that refuses, one line)."""
    import os
    import signal
    import sys
    import time

    from cliutil import cli_env
    from proctable import left_behind, marked_env

    temp = tmp_path / "tmp"
    temp.mkdir()
    mark, token = marked_env()
    env = cli_env(tmp_path / "cache", TMPDIR=str(temp), **mark)
    argv = [sys.executable, "-m", "buildkit.cli", "base", "debian", "--tag", "buildkit-test/killed-base:never"]
    first = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 180
    while not list(temp.glob("buildkit-base-*/root-*/debootstrap")) and time.monotonic() < deadline:
        assert first.poll() is None, first.communicate()[1].decode()[-2000:]
        time.sleep(0.5)
    left = list(temp.glob("buildkit-base-*"))
    assert left, "debootstrap never started"
    while alive := left_behind(token):  # buildkit, debootstrap and what it runs: every process of this run
        for line in alive:
            try:
                os.kill(int(line.split()[0]), signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    first.wait(30)
    assert [p.name for p in temp.iterdir()] == [left[0].name]  # what a killed run leaves
    env.pop("SIGNAL_TEST_MARK")
    again = subprocess.run([*argv, "--mirror", "http://127.0.0.1:1/debian"], env=env, capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 1 and again.stderr.splitlines()[-1].startswith("error: "), again.stderr[-2000:]
    assert list(temp.iterdir()) == []  # the killed run's folder swept, this run's own removed
