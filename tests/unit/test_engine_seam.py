"""The flows through the engine seam (engine/api.py), with the in-memory FakeEngine: what they ask
of an engine. And the engine turn: a bake waits while another process holds it exclusively."""

from __future__ import annotations

import io
import stat
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from buildkit.core.check import Status
from buildkit.core.errors import VerifyError
from buildkit.core.filelock import file_lock
from buildkit.engine.api import Host, ImageInfo
from buildkit.engine.current import get_engine, use_engine
from buildkit.engine.bake import TargetOutcome, run_bake
from buildkit.engine.bakefile import bake_document, write_bake_file
from buildkit.engine.buildx import BuildOptions, BuildResult
from buildkit.engine.dockerengine import DockerEngine
from buildkit.flows.doctor.enginecheck import check_buildx_and_builder, check_engine, engine_info
from buildkit.flows.matrix.bake import verify_variant
from buildkit.plan.buildplan import make_plan, make_request
from buildkit.plan.plantypes import Resolved
from buildkit.plan.request import SourceFacts
from buildkit.plan.config import load_config
from buildkit.verify.gate import FailedVerification, verified_or_removed
from fakeengine import FakeEngine

COMMIT = "c0ffee" + "0" * 34


def _plan():
    cfg = load_config(None, env={}, overrides={"build.arch": ("cpu", "test")})
    facts = SourceFacts(url="https://example.invalid/fork", commit=COMMIT, commit_time=1767225600,
                        build_number=1, patch_set_sha256="", patch_names=())
    return make_plan(make_request(cfg), Resolved(facts, "t", "9.9.9"))


def _oci_target(tmp_path: Path, name: str, tags: list[str], **extra) -> dict:
    archive = tmp_path / f"{name}.oci.tar"
    archive.write_bytes(b"")
    return {"context": str(tmp_path), "dockerfile": "Dockerfile", "tags": [],
            "output": [f'type=oci,dest={archive},rewrite-timestamp=true,"name={",".join(tags)}"'], **extra}


def test_get_engine_answers_the_engine_in_use():
    fake = FakeEngine()
    with use_engine(fake):
        assert get_engine() is fake
    assert get_engine() is not fake


class HostOnly:
    """A second engine of one role (engine/api.py's Host), no Engine subclass: mypy checks it structurally."""

    def ping(self) -> None:
        pass

    def buildx_version(self) -> tuple[int, int, int]:
        return (0, 19, 3)

    def info(self) -> dict[str, Any]:
        return {"ServerVersion": "28.1.1", "DockerRootDir": "/var/lib/docker",
                "DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]]}

    def inspect_builder(self, name: str = "") -> str:
        return "Name: default\nDriver: docker\nStatus: running\nPlatforms: linux/amd64, linux/arm64"

    def arch(self) -> str:
        return "amd64"


def test_a_function_asks_only_for_the_role_it_uses() -> None:
    """doctor's engine checks are handed a Host: an engine with those five methods only is enough."""
    host: Host = HostOnly()
    info, why = engine_info(host)
    assert check_engine(info, why).status == Status.PASSED
    check, platforms = check_buildx_and_builder("", host)
    assert check.status == Status.PASSED and platforms == ["linux/amd64", "linux/arm64"], check


def test_bake_loads_each_oci_target_under_its_tags_in_one_engine_turn(tmp_path):
    fake = FakeEngine()
    doc = bake_document({"a": _oci_target(tmp_path, "a", ["x/a:1", "x/a:sha"]),
                         "b": _oci_target(tmp_path, "b", ["x/b:1"])})
    bake_file = write_bake_file(tmp_path / "docker-bake.json", doc)
    outcomes = run_bake(fake, bake_file, ["a", "b"], BuildOptions(progress="plain"), tmp_path / "w",
                        stream=io.StringIO())
    assert all(o.ok for o in outcomes.values())
    loads = [c for c in fake.calls if c[0] == "load"]
    assert loads == [("load", str(tmp_path / "a.oci.tar"), ("x/a:1", "x/a:sha")),
                     ("load", str(tmp_path / "b.oci.tar"), ("x/b:1",))]
    result = outcomes["a"].result
    assert result is not None and result.tags == ("x/a:1", "x/a:sha") and "x/a:sha" in fake.images
    assert fake.turns == [False]  # one shared turn for the whole bake


def test_a_missing_cache_to_import_is_not_a_targets_failure(tmp_path):
    """BuildKit marks a --cache-from import ERROR when the ref does not exist yet (a first build) and builds on
    without it. The engine tier's bake (test_remote_builder_docker.py) reported its target failed by that
    line and did not bake it again; the other target's failed cache export is its own failure."""
    lines = ["#5 [cpu] importing cache manifest from 127.0.0.1:1/remote/layers:cpu-amd64",
             "#5 ERROR: failed to configure registry cache importer: 127.0.0.1:1/remote/layers:cpu-amd64: not found",
             "#32 [cpu-light] exporting cache to registry",
             "#32 ERROR: error writing manifest blob: failed to open writer: unexpected status from HEAD request"
             " to http://127.0.0.1:1/v2/remote/layers/manifests/cpu-light-amd64: 500 Internal Server Error"]
    fake = FakeEngine(bake_lines=lines, bake_code=1)
    doc = bake_document({n: _oci_target(tmp_path, n, [f"x/app:{n}"]) for n in ("cpu", "cpu-light")})
    bake_file = write_bake_file(tmp_path / "docker-bake.json", doc)
    stream = io.StringIO()
    outcomes = run_bake(fake, bake_file, ["cpu", "cpu-light"], BuildOptions(progress="plain"), tmp_path / "w",
                        stream=stream)
    assert "the bake of 2 targets failed (cpu-light); baking cpu again one by one" in stream.getvalue()
    light = outcomes["cpu-light"]
    assert not light.isolated and light.error.endswith("500 Internal Server Error")
    assert outcomes["cpu"].isolated and "cache importer" not in outcomes["cpu"].error
    assert [c[2] for c in fake.calls if c[0] == "bake"] == [("cpu", "cpu-light"), ("cpu",)]


def test_bake_with_a_no_cache_target_takes_the_engine_alone_and_reports_a_failed_load(tmp_path):
    fake = FakeEngine()
    target = _oci_target(tmp_path, "a", ["x/a:1"], **{"no-cache": True})
    (tmp_path / "a.oci.tar").unlink()  # the exporter wrote nothing: the load fails
    bake_file = write_bake_file(tmp_path / "docker-bake.json", bake_document({"a": target}))
    outcome = run_bake(fake, bake_file, ["a"], BuildOptions(progress="plain"), tmp_path / "w",
                       stream=io.StringIO())["a"]
    assert fake.turns == [True]
    assert not outcome.ok and outcome.error.startswith("docker load of the built image failed")


def test_a_failed_verification_removes_every_tag_and_keeps_the_report():
    fake = FakeEngine(run_result=lambda image, entrypoint, args: (
        127, "/app/llama-server: error while loading shared libraries: libgomp.so.1: cannot open"))
    tags = ("x/app:cpu", "x/app:sha-c0ffee0-cpu")
    for tag in tags:
        fake.images[tag] = ImageInfo(id="sha256:" + "4" * 64, tags=tags)
    with use_engine(fake):
        with pytest.raises(FailedVerification, match="failed verification and was removed") as info:
            verified_or_removed(_plan(), tags, engine=fake)
    assert ("untag", tags) in fake.calls and not fake.images
    assert any(c.name == "version" and "libgomp.so.1" in c.detail for c in info.value.report.failures())


def test_verification_that_cannot_reach_the_engine_removes_the_tags_too():
    fake = FakeEngine(reachable=False)
    with use_engine(fake):
        with pytest.raises(VerifyError, match="cannot verify the image"):
            verified_or_removed(_plan(), ("x/app:cpu",), engine=fake)
    assert fake.calls == [("untag", ("x/app:cpu",))]


def test_a_matrix_variant_that_fails_verification_reports_it_and_loses_its_tags():
    class Prepared:
        plan, cuda_root, cuda_roots = _plan(), None, ()

    fake = FakeEngine(run_result=lambda image, entrypoint, args: (1, "boom"))
    result = BuildResult(digest="sha256:" + "2" * 64, config_digest="", tags=("x/app:cpu",), seconds=1.0)
    with use_engine(fake):
        report, error = verify_variant(Prepared, TargetOutcome("cpu", result, "", 1.0, False), fake)
    assert report is not None and not report.ok
    assert error.startswith("image x/app:cpu failed verification and was removed")
    assert ("untag", ("x/app:cpu",)) in fake.calls


def test_bake_waits_for_the_engine_while_a_no_cache_build_holds_it(tmp_path, monkeypatch):
    """The real runner with a stand-in `docker` program: while the exclusive lock is held (as a
    --no-cache build holds it), bake says it waits and does not start; it runs once the lock goes."""
    lock = tmp_path / "engine.lock"
    monkeypatch.setenv("LLAMA_BUILDKIT_ENGINE_LOCK", str(lock))
    started = tmp_path / "started"
    docker = tmp_path / "docker"
    docker.write_text(f"#!{sys.executable}\nimport sys, pathlib, json\n"
                      f"pathlib.Path({str(started)!r}).write_text('x')\n"
                      "a = sys.argv; m = a[a.index('--metadata-file') + 1]\n"
                      "pathlib.Path(m).write_text(json.dumps("
                      "{'a': {'containerimage.digest': 'sha256:' + '3' * 64}}))\n")
    docker.chmod(docker.stat().st_mode | stat.S_IXUSR)
    bake_file = write_bake_file(tmp_path / "docker-bake.json", bake_document(
        {"a": {"context": str(tmp_path), "tags": ["x/a:1"], "output": ["type=docker"]}}))
    log = io.StringIO()
    done: dict = {}
    # the lock is exclusive, on its own descriptor: another holder as far as flock is concerned
    with file_lock(lock):
        thread = threading.Thread(target=lambda: done.update(run_bake(
            DockerEngine(str(docker)), bake_file, ["a"], BuildOptions(progress="plain"), tmp_path / "w", stream=log)))
        thread.start()
        while "waiting for a --no-cache build to finish" not in log.getvalue():
            assert thread.is_alive(), log.getvalue()
            thread.join(0.05)
        assert not started.exists()  # it waits before running anything
    thread.join()
    assert started.exists() and done["a"].ok


def test_a_target_cancelled_mid_export_by_another_targets_failure_is_baked_again_alone(tmp_path):
    """buildx 0.13 cancels a bake's targets when one fails; a target caught exporting shows the session's
    error, not one of its own: it is baked again by itself, while the target whose compile failed is not."""
    fake = FakeEngine(bake_code=1, bake_lines=[
        "#7 [cpu 8/8] COPY --from=build /app/bin/ /app/",
        "#9 [cuda 7/8] RUN cmake --build /build",
        "#9 12.3 /src/ggml-cuda.cu:134:2: error: #error broken on purpose",
        "#9 ERROR: process \"/bin/sh -c cmake --build /build\" did not complete successfully: exit code: 2",
        "#7 ERROR: failed to copy to tar: rpc error: code = Unavailable desc = error reading from server: "
        "read unix /var/run/docker.sock->@: read: connection reset by peer"])
    doc = bake_document({"cpu": _oci_target(tmp_path, "cpu", ["x/a:cpu"]),
                         "cuda": _oci_target(tmp_path, "cuda", ["x/a:cuda"])})
    bake_file = write_bake_file(tmp_path / "docker-bake.json", doc)
    log = io.StringIO()
    outcomes = run_bake(fake, bake_file, ["cpu", "cuda"], BuildOptions(progress="plain"), tmp_path / "w", stream=log)
    assert [c[2] for c in fake.calls if c[0] == "bake"] == [("cpu", "cuda"), ("cpu",)]
    assert "baking cpu again one by one" in log.getvalue()
    assert not outcomes["cuda"].isolated and "error: #error broken on purpose" in outcomes["cuda"].error
    assert outcomes["cpu"].isolated  # (the fake's second bake fails too: only the retry is the point)
