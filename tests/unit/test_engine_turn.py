"""The engine turn (engine/runner.py): a --no-cache build waits only for the builds that start from one of its
images, and they for it. Real flocks, held by another process."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from buildkit.engine import runner
from buildkit.engine.runner import engine_turn, starting_images

BASE = "127.0.0.1:1/llama-buildkit/base:4e53cdd0"
DOCKERFILE = f"""FROM --platform=linux/amd64 {BASE} AS build
RUN --mount=type=cache,id=ccache,target=/ccache --mount=type=bind,from=seed,target=/seed true
FROM {BASE} AS base
COPY --from=build /app/lib/ /app/lib/
COPY --from=cuda-runtime /lib64/ /usr/lib/
FROM base AS server
FROM scratch
COPY --from=0 /out/ /
"""


def test_the_images_a_dockerfile_starts_from_are_its_from_images_and_foreign_from_names():
    assert starting_images(DOCKERFILE) == {BASE, "seed", "cuda-runtime"}
    assert starting_images("from busybox as b\nFROM b\n") == {"busybox"}
    assert starting_images("FROM scratch\nCOPY a b\n") == frozenset()


def test_one_image_is_one_turn_whichever_way_the_dockerfile_names_it():
    digest = "4e53cdd0733ee479f2f0f5f72727ffe30ab93e26fecb0352d1d717117616cc5a"
    names = [f"127.0.0.1:1/llama-buildkit/base:{digest}", f"debian:bookworm@sha256:{digest}",
             f"local-base-{digest[:12]}"]
    assert {starting_images(f"FROM {n} AS build\n") for n in names} == {frozenset({"sha256:4e53cdd0733e"})}


@pytest.fixture
def lock_env(tmp_path, monkeypatch):
    monkeypatch.setenv(runner.ENGINE_LOCK_ENV, str(tmp_path / "engine.lock"))
    return tmp_path


def hold(tmp_path, images: list[str] | None, exclusive: bool) -> subprocess.Popen:
    """Another process holding the turn until its stdin closes; returns once it holds it."""
    code = textwrap.dedent(f"""
        import sys
        from buildkit.engine.runner import engine_turn
        images = {images!r}
        with engine_turn({exclusive!r}, images=frozenset(images) if images is not None else None):
            print("held", flush=True)
            sys.stdin.read()
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, runner.ENGINE_LOCK_ENV: str(tmp_path / "engine.lock")})
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def release(proc: subprocess.Popen) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0


def waits_for(other: subprocess.Popen, exclusive: bool, images: frozenset[str] | None) -> str:
    """Take the turn in a thread while other holds its own: what the turn said while it waited (it must
    wait); it gets the turn once other lets go."""
    said = io.StringIO()
    done = threading.Event()

    def take() -> None:
        with engine_turn(exclusive, said, images):
            done.set()

    worker = threading.Thread(target=take)
    worker.start()
    try:
        for _ in range(600):  # it says so before it waits
            if said.getvalue() or done.wait(0.05):
                break
        assert not done.is_set(), "the turn was taken while the other process held it"
    finally:
        release(other)
        worker.join(timeout=30)
    assert done.is_set()
    return said.getvalue()


def test_a_no_cache_build_from_another_base_does_not_wait(lock_env):
    other = hold(lock_env, ["debian:trixie"], exclusive=True)
    try:
        said = io.StringIO()
        with engine_turn(True, said, frozenset({BASE})):
            pass
        with engine_turn(False, said, frozenset({BASE})):
            pass
        assert said.getvalue() == ""
    finally:
        release(other)


@pytest.mark.parametrize("held_exclusive, exclusive", [(True, False), (False, True), (True, True)])
def test_builds_from_a_common_base_wait_when_one_is_no_cache(lock_env, held_exclusive, exclusive):
    other = hold(lock_env, [BASE, "seed"], exclusive=held_exclusive)
    assert "same base image" in waits_for(other, exclusive, frozenset({"debian:trixie", BASE}))


def test_shared_builds_from_a_common_base_run_together(lock_env):
    other = hold(lock_env, [BASE], exclusive=False)
    try:
        said = io.StringIO()
        with engine_turn(False, said, frozenset({BASE})):
            pass
        assert said.getvalue() == ""
    finally:
        release(other)


def test_a_build_of_unknown_images_runs_alone_when_no_cache(lock_env):
    other = hold(lock_env, ["debian:trixie"], exclusive=False)
    assert "a --no-cache build runs alone)" in waits_for(other, True, None)


def test_a_turn_inside_a_held_one_is_covered_only_by_its_images(lock_env):
    said = io.StringIO()
    with engine_turn(True, said, frozenset({BASE})):
        with engine_turn(True, said, None):  # the bake's own retries
            with engine_turn(False, said, frozenset({BASE})):
                assert len(runner._held) == 3
    assert runner._held == [] and said.getvalue() == ""
