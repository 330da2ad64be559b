"""Pure parts of the build stage (argv, version parsing), the lock file, and the CLI's no-Docker commands."""

import contextlib
import json
import os
import tempfile
import stat
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from buildkit.engine.buildx import BuildOptions, check_buildx, parse_buildx_version
from buildkit.engine.dockerengine import DockerEngine
from buildkit.flows.unit.buildspec import build_command
from buildkit.cli.main import main
from buildkit.core.errors import BuildError, LockError
from buildkit.plan.inputs import BaseImage
from buildkit.release.lock import LockEntry
from buildkit.release.lockfile import Lock, update_lock, write_lock_entry
from buildkit.plan.render import RenderResult
from test_plan_render import plan_for


def buildx_argv(plan, rendered, options, metadata_file) -> list[str]:
    """The command line the Docker engine runs for a plan (flows/unit/buildspec.build_command)."""
    return build_command(plan, rendered, options, metadata_file, DockerEngine())


def rendered(tmp_path: Path, named=()) -> RenderResult:
    return RenderResult(context_dir=tmp_path, dockerfile=tmp_path / "Dockerfile", dockerfile_sha256="0" * 64,
                        named_contexts=named)


def test_buildx_argv_is_a_list_with_every_option(tmp_path):
    plan = plan_for(**{"build.arch": "sm_120"})
    options = BuildOptions(builder="multi", progress="plain", cache_from=("type=local,src=/c",),
                           cache_to=("type=local,dest=/c,mode=max",))
    argv = buildx_argv(plan, rendered(tmp_path, (("cuda-root", Path("/r")),)), options, tmp_path / "m.json")
    assert argv[:3] == ["docker", "buildx", "build"]
    pairs = list(zip(argv, argv[1:], strict=False))
    for pair in [("--builder", "multi"), ("--platform", "linux/amd64"), ("--target", "server"),
                 ("--build-arg", "SOURCE_DATE_EPOCH=1767225600"), ("--metadata-file", str(tmp_path / "m.json")),
                 ("--progress", "plain"), ("--cache-from", "type=local,src=/c"),
                 ("--cache-to", "type=local,dest=/c,mode=max"), ("--build-context", "cuda-root=/r"),
                 ("--tag", "buun-llama-cpp:cuda13.1-sm120"), ("--file", str(tmp_path / "Dockerfile"))]:
        assert pair in pairs, pair
    assert ("--label", "org.llama-buildkit.arch=sm_120") in pairs
    assert "--load" in argv and "--push" not in argv and argv[-1] == str(tmp_path)


def test_label_values_with_spaces_stay_one_argument(tmp_path):
    argv = buildx_argv(plan_for(), rendered(tmp_path), BuildOptions(), tmp_path / "m.json")
    flags = next(a for a in argv if a.startswith("org.llama-buildkit.flags="))
    assert " -DGGML_CUDA=ON " in flags


@pytest.mark.parametrize("text,version", [
    ("github.com/docker/buildx v0.13.1 1234abc", (0, 13, 1)),
    ("github.com/docker/buildx 0.13.1+ds1 0.13.1+ds1-3", (0, 13, 1)),
    ("nonsense", None),
])
def test_parse_buildx_version(text, version):
    assert parse_buildx_version(text) == version


def fake_docker(tmp_path: Path, output: str, code: int = 0) -> str:
    """A stand-in CLI for versions of buildx this machine does not have."""
    script = tmp_path / "docker"
    script.write_text(f"#!/bin/sh\necho '{output}'\nexit {code}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_too_old_buildx_names_the_version_found(tmp_path):
    with pytest.raises(BuildError, match=r"docker buildx 0\.8\.2 is too old; buildx 0\.10\.0 or newer"):
        check_buildx(DockerEngine(fake_docker(tmp_path, "github.com/docker/buildx v0.8.2 abc")))


def test_missing_buildx_and_missing_docker(tmp_path):
    with pytest.raises(BuildError, match="docker buildx is not installed"):
        check_buildx(DockerEngine(fake_docker(tmp_path, "docker: 'buildx' is not a docker command.", 1)))
    with pytest.raises(BuildError, match="not on PATH"):
        check_buildx(DockerEngine("/nonexistent/docker"))


def entry(**changes) -> LockEntry:
    base = LockEntry(
        source_url="u", ref="r", commit="c" * 40, build_number=1, patches=(), patch_set_sha256="p",
        template="cpu.Dockerfile.j2", template_sha256="t", dockerfile_sha256="d",
        base_images=(BaseImage("img", "sha256:1"),), cuda_version=None, cuda_root=None, arch="cpu",
        cmake_archs=None, target="server", platform="linux/amd64", no_vmm=True, cmake_args=("-DA=1",),
        source_date_epoch=1, tool_version="0.1.0", image_name="x", image_digest="sha256:2", image_id="sha256:3",
        tags=("x:cpu",), variant="cpu")
    return replace(base, **changes)


def test_lock_keeps_other_variants_and_replaces_its_own(tmp_path):
    path = tmp_path / "buildkit.lock"
    write_lock_entry(path, entry())
    write_lock_entry(path, entry(variant="cuda13.1-sm120", arch="sm_120"))
    write_lock_entry(path, entry(image_digest="sha256:new"))
    builds = json.loads(path.read_text())["builds"]
    assert set(builds) == {"cpu/server", "cuda13.1-sm120/server"}
    assert builds["cpu/server"]["image_digest"] == "sha256:new"
    assert os.listdir(tmp_path) == ["buildkit.lock"]  # no temporary or guard file left behind


def test_lock_write_failure_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "buildkit.lock"
    write_lock_entry(path, entry())
    before = path.read_bytes()

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)  # core/wholefile.py's rename (a real full disk: tests/engine)
    with pytest.raises(LockError, match="disk full"):
        write_lock_entry(path, entry(image_digest="sha256:other"))
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["buildkit.lock"]


def test_update_lock_is_one_read_modify_write_and_a_failing_change_writes_nothing(tmp_path):
    path = tmp_path / "sub" / "buildkit.lock"
    write_lock_entry(path, entry())
    written = update_lock(path, lambda lock: lock.with_nightly({"url": "u"}))
    lock = Lock.read(path)
    assert lock == written and lock.nightly == {"url": "u"} and set(lock.builds) == {"cpu/server"}
    before = path.read_bytes()

    def change(lock):
        lock.without("cpu/server")
        raise LockError("no such entry")
    with pytest.raises(LockError, match="no such entry"):
        update_lock(path, change)
    assert path.read_bytes() == before and os.listdir(path.parent) == ["buildkit.lock"]


def test_unreadable_lock_is_one_error(tmp_path):
    path = tmp_path / "buildkit.lock"
    path.write_text("{not json")
    with pytest.raises(LockError, match="cannot read the lock file"):
        Lock.read(path)
    path.write_text(json.dumps({"lock_version": 99, "builds": {}}))
    with pytest.raises(LockError, match="not a buildkit lock of version 1"):
        Lock.read(path)


def run_cli(*args, env=None, cwd=None):
    runner = CliRunner()
    env = {k: None for k in os.environ if k.startswith("LLAMA_BUILDKIT_")} | (env or {})
    # a folder of its own, as click's isolated_filesystem gave (deprecated in click 8.5)
    with tempfile.TemporaryDirectory(dir=cwd) as where, contextlib.chdir(where):
        return runner.invoke(main, list(args), env=env, catch_exceptions=False)


def test_cli_config_shows_origins(tmp_path):
    result = run_cli("config", "--arch", "sm_89", "--set", "build.jobs=3",
                     env={"LLAMA_BUILDKIT_BUILD_CUDA_VERSION": "12.8"}, cwd=tmp_path)
    assert result.exit_code == 0
    lines = {ln.split()[0]: ln for ln in result.output.splitlines() if not ln.startswith("#")}
    assert "sm_89" in lines["build.arch"] and "(--arch;" in lines["build.arch"]
    assert "(--set build.jobs;" in lines["build.jobs"]
    assert "(env LLAMA_BUILDKIT_BUILD_CUDA_VERSION;" in lines["build.cuda_version"]
    assert "(default;" in lines["source.url"]


def test_cli_bad_config_is_one_line_and_exit_1(tmp_path):
    (tmp_path / "bad.toml").write_text('schema_version = 1\n[build]\narc = "sm_120"\n')
    result = run_cli("config", "--config", str(tmp_path / "bad.toml"))
    assert result.exit_code == 1
    assert result.output.strip().count("\n") == 0 and "did you mean 'build.arch'" in result.output


def test_cli_archs():
    result = run_cli("archs")
    assert result.exit_code == 0 and "120a-real" in result.output and "cpu" in result.output
    rows = json.loads(run_cli("archs", "--json").output)
    assert {r["arch"] for r in rows} >= {"sm_120", "sm_121", "cpu"}


def test_cli_build_help_explains_the_options():
    result = run_cli("build", "--help")
    for text in ("--arch", "--no-vmm / --vmm", "--print", "--source", "[build.arch]", "--cache-from"):
        assert text in result.output


def test_no_cache_reaches_buildx_and_changes_no_recorded_input(tmp_path, monkeypatch):
    """build.no_cache (`buildkit build --no-cache`) says how to build, not what: buildx gets
    --no-cache, and the plan (labels, inputs, build key) is the same."""
    from buildkit.cli.unitspecs import build_options
    from buildkit.flows.unit import spec
    from buildkit.plan.config import load_config

    monkeypatch.setattr(spec, "image_store", lambda engine: "containerd")
    cfgs = {value: load_config(None, env={}, overrides={"build.no_cache": (value, "test")}) for value in (False, True)}
    argvs = {value: buildx_argv(plan_for(), rendered(tmp_path), build_options(cfg, DockerEngine()),
                                tmp_path / "m.json")
             for value, cfg in cfgs.items()}
    assert "--no-cache" in argvs[True] and "--no-cache" not in argvs[False]
    assert [a for a in argvs[True] if a != "--no-cache"] == argvs[False]
    assert plan_for(**{"build.no_cache": True}).labels == plan_for().labels
    env = load_config(None, env={"LLAMA_BUILDKIT_BUILD_NO_CACHE": "1"}, overrides={})
    assert env["build.no_cache"] is True
    help_text = run_cli("build", "--help").output
    assert "--no-cache" in help_text and "ccache" in help_text
