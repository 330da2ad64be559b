"""`buildkit doctor`: the pure judgements, and the real CLI against the real engine, a dead socket,
a small tmpfs cache folder and a loopback registry with htpasswd (wrong and right login)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from buildkit.flows.doctor.diskcheck import required_gb
from buildkit.core.check import Status
from buildkit.flows.doctor.check import Variant, version_tuple
from buildkit.flows.doctor.platformcheck import judge_driver, judge_emulation, parse_nvidia_smi
from cliutil import buildkit_env

CUDA131 = Variant("cuda13.1-sm120", (13, 1), "sm_120", "linux/amd64")
CUDA128 = Variant("cuda12.8-sm120", (12, 8), "sm_120", "linux/amd64")
CPU = Variant("cpu", None, "cpu", "linux/amd64")


# --------------------------------------------------------------------------- pure

def test_version_tuple():
    assert version_tuple("26.1.5+dfsg1") == (26, 1, 5)
    assert version_tuple("580.65.06") == (580, 65, 6)
    assert version_tuple("") == ()


def test_required_space_grows_with_the_matrix_and_cuda_needs_more_than_cpu():
    assert required_gb([CPU]) < required_gb([CUDA131])
    assert required_gb([CUDA131, CUDA128]) > required_gb([CUDA131])
    assert required_gb([CUDA131, CPU]) == required_gb([CUDA131]) + required_gb([CPU])  # other bases
    wheels = Variant("cuda13.1-sm120", (13, 1), "sm_120", "linux/amd64", provider="wheels")
    assert required_gb([CPU]) < required_gb([wheels]) < required_gb([CUDA131])  # no 9 GB devel image


def test_driver_too_old_for_cuda13_fails_with_the_figure():
    rows = parse_nvidia_smi("570.133.07, NVIDIA GeForce RTX 5090, 12.0\n")
    check = judge_driver(rows, [CUDA131])
    assert check.status == Status.FAILED and ">= 580" in check.detail and "580 or newer" in check.fix
    assert judge_driver(rows, [CUDA128]).status == Status.PASSED  # CUDA 12.x runs on >= 525


def test_driver_580_runs_cuda13_and_a_wrong_gpu_is_a_warning_naming_the_arch():
    rows = parse_nvidia_smi("580.65.06, NVIDIA GeForce RTX 5090, 12.0\n")
    assert judge_driver(rows, [CUDA131]).status == Status.PASSED
    ada = parse_nvidia_smi("580.65.06, NVIDIA GeForce RTX 4090, 8.9\n")
    check = judge_driver(ada, [CUDA131])
    assert check.status == Status.WARNED and "no kernel image" in check.detail and "--arch sm_89" in check.fix


def test_emulation_native_ok_foreign_needs_a_handler_or_a_node():
    assert judge_emulation(["linux/amd64"], "amd64", None, []).status == Status.PASSED
    missing = judge_emulation(["linux/arm64"], "amd64", [], [])
    assert missing.status == Status.FAILED and "apt-get install qemu-user-static" in missing.fix
    assert judge_emulation(["linux/arm64"], "amd64", ["qemu-aarch64"], []).status == Status.PASSED
    assert judge_emulation(["linux/arm64"], "amd64", None, ["linux/amd64", "linux/arm64"]).status == Status.PASSED


def test_emulation_says_one_thing_and_names_only_what_can_be_had_offline():
    """Issue 41: the seed's direction (build.build_platform linux/arm64 on an amd64 host, images for amd64) said
    "no emulation needed" and then "fail ... nothing here can run linux/arm64", and its fix pulled an image from
    docker.io."""
    check = judge_emulation(["linux/arm64"], "amd64", None, [], cross=["linux/amd64"])
    assert check.status == Status.FAILED and "nothing here can run linux/arm64" in check.detail
    assert "no emulation needed" not in check.detail and "needs emulation" in check.detail
    assert "docker run" not in check.fix and "tonistiigi" not in check.fix  # no image from docker.io
    assert "buildkit base debian --platform linux/amd64,linux/arm64" in check.fix
    assert "unset build.build_platform" in check.fix
    # the ordinary cross build compiles here: that one says no emulation is needed, and passes
    here = judge_emulation(["linux/amd64"], "amd64", None, [], cross=["linux/arm64"])
    assert here.status == Status.PASSED and "no emulation needed" in here.detail


# --------------------------------------------------------------------------- the real CLI

def doctor(project: Path, *args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = buildkit_env()
    env["LLAMA_BUILDKIT_CACHE_DIR"] = str(project / "cache")
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "buildkit.cli", "doctor", "--json", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=300)


def by_name(proc: subprocess.CompletedProcess) -> dict[str, dict]:
    data = json.loads(proc.stdout)
    return {c["name"]: c for c in data["checks"]}


def project(root: Path, image: str, arch: str = "cpu", os_image: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    base = f'[base]\nos_image = "{os_image}"\n' if os_image else ""
    (root / "buildkit.toml").write_text(f'schema_version = 1\n[image]\nname = "{image}"\n[build]\narch = "{arch}"\n'
                                        + base)
    return root


@pytest.mark.docker
def test_doctor_passes_on_this_machine(tmp_path, docker_engine, registry_plain):
    from images import DEBIAN_IMAGE as DEBIAN

    proc = doctor(project(tmp_path, f"{registry_plain.host}/team/doctor", os_image=DEBIAN))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = by_name(proc)
    assert set(checks) == {"engine", "buildx", "disk", "registry", "bases", "driver", "emulation"}
    assert all(c["status"] == "ok" for c in checks.values()), checks
    assert "containerd image store" in checks["engine"]["detail"]
    # the text form: one line per check
    env = buildkit_env()
    env["LLAMA_BUILDKIT_CACHE_DIR"] = str(tmp_path / "cache")
    text = subprocess.run([sys.executable, "-m", "buildkit.cli", "doctor"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300).stdout.splitlines()
    assert [line.split()[:2] for line in text] == [["ok", n] for n in ("engine", "buildx", "disk", "registry",
                                                                         "bases", "driver", "emulation")]


@pytest.mark.docker
def test_doctor_warns_when_a_base_image_cannot_be_had(tmp_path, docker_engine, registry_plain):
    """The default docker.io bases where docker.io cannot be reached: doctor said all ok, and the build then
    stopped at its start. A name under a registry that refuses connections stands for it here."""
    proc = doctor(project(tmp_path, f"{registry_plain.host}/team/doctor", os_image="127.0.0.1:1/none/debian:12"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bases = by_name(proc)["bases"]
    assert bases["status"] == "warn" and "127.0.0.1:1/none/debian:12" in bases["detail"]
    assert "buildkit base debian" in bases["fix"] and "--provider wheels" in bases["fix"]


@pytest.mark.docker
def test_doctor_fails_naming_the_fix_when_the_engine_is_unreachable(tmp_path, docker_engine):
    dead = tmp_path / "dead.sock"  # nothing listens there
    proc = doctor(project(tmp_path, "localhost:1/x"), "--offline", env_extra={"DOCKER_HOST": f"unix://{dead}"})
    assert proc.returncode == 1
    engine = by_name(proc)["engine"]
    assert engine["status"] == "fail" and str(dead) in engine["detail"]
    assert "start the engine" in engine["fix"] and "DOCKER_HOST" in engine["fix"]


@pytest.mark.docker
def test_build_stops_before_fetching_when_the_engine_is_unreachable(tmp_path, docker_engine):
    dead = tmp_path / "dead.sock"
    root = project(tmp_path, "localhost:1/x")
    env = buildkit_env()
    env.update(DOCKER_HOST=f"unix://{dead}", LLAMA_BUILDKIT_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-m", "buildkit.cli", "build", "--source", str(tmp_path / "no-such-repo")],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: engine: no Docker engine") and "start the engine" in proc.stderr
    assert not (tmp_path / "cache" / "git").exists()  # nothing fetched


@pytest.mark.docker
def test_the_disk_figure_comes_from_build_min_free_gb_else_the_estimate(tmp_path, docker_engine):
    root = project(tmp_path, "localhost:1/x")
    estimate = by_name(doctor(root, "--offline", env_extra={"LLAMA_BUILDKIT_BUILD_MIN_FREE_GB": "-1"}))["disk"]
    assert f"need {required_gb([CPU]):g} GB (1 cpu variant(s))" in estimate["detail"], estimate
    with (root / "buildkit.toml").open("a") as toml:
        toml.write("min_free_gb = 1000000\n")  # in [build], the file's last table
    proc = subprocess.run([sys.executable, "-m", "buildkit.cli", "doctor", "--json", "--offline"], cwd=root,
                          env={k: v for k, v in buildkit_env().items() if k != "LLAMA_BUILDKIT_BUILD_MIN_FREE_GB"}
                          | {"LLAMA_BUILDKIT_CACHE_DIR": str(root / "cache")}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1
    disk = by_name(proc)["disk"]
    assert disk["status"] == "fail" and "need 1e+06 GB (build.min_free_gb)" in disk["detail"], disk
    assert by_name(doctor(root, "--offline", "--min-free-gb", "0"))["disk"]["status"] == "ok"  # the option wins
    bad = doctor(root, "--offline", env_extra={"LLAMA_BUILDKIT_BUILD_MIN_FREE_GB": "-5"})
    assert bad.returncode != 0 and "build.min_free_gb must be" in bad.stdout + bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.docker
def test_doctor_fails_when_disk_space_is_short(tmp_path, docker_engine):
    root = project(tmp_path, "localhost:1/x")
    # a threshold above what this disk has
    proc = doctor(root, "--offline", "--min-free-gb", "1000000")
    assert proc.returncode == 1
    disk = by_name(proc)["disk"]
    assert disk["status"] == "fail" and "need 1e+06 GB (--min-free-gb)" in disk["detail"]
    assert "docker buildx prune" in disk["fix"]
    # a real small file system as cache.dir, against the default need of a cpu variant
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(small)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        proc = doctor(root, "--offline", "--cache-dir", str(small))
        assert proc.returncode == 1
        disk = by_name(proc)["disk"]
        assert disk["status"] == "fail" and f"{small} (cache.dir)" in disk["fix"]
    finally:
        subprocess.run(["umount", str(small)], check=True)


@pytest.mark.docker
def test_doctor_fails_when_the_registry_login_is_wrong(tmp_path, docker_engine, registry_auth):
    (user, password), = registry_auth.users.items()
    root = project(tmp_path, f"{registry_auth.host}/team/doctor")

    def with_login(secret: str) -> dict[str, str]:
        config = tmp_path / f"docker-config-{secret}"
        config.mkdir()
        auth = base64.b64encode(f"{user}:{secret}".encode()).decode()
        (config / "config.json").write_text(json.dumps({"auths": {registry_auth.host: {"auth": auth}}}))
        return {"DOCKER_CONFIG": str(config)}

    wrong = doctor(root, env_extra=with_login("not-the-password"))
    assert wrong.returncode == 1
    reg = by_name(wrong)["registry"]
    assert reg["status"] == "fail" and "rejected the credentials" in reg["detail"]
    assert f"docker login {registry_auth.host}" in reg["fix"]
    right = doctor(root, env_extra=with_login(password))
    assert by_name(right)["registry"]["status"] == "ok", right.stdout
    assert user in by_name(right)["registry"]["detail"]


@pytest.mark.docker
def test_an_unreachable_registry_is_a_warning_unless_asked_to_push(tmp_path, docker_engine):
    """Issue 41: a build without --push never contacts the registry, so doctor does not fail for it; the fix
    line said so while the exit code was 1. With --push (a check for `build --push`) it fails."""
    import socket

    with socket.socket() as sock:  # a loopback port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    root = project(tmp_path, f"127.0.0.1:{port}/team/doctor")
    proc = doctor(root)
    reg = by_name(proc)["registry"]
    assert reg["status"] == "warn" and "only a push needs it" in reg["detail"], proc.stdout
    assert proc.returncode == 0, proc.stdout
    pushing = doctor(root, "--push")
    assert pushing.returncode == 1 and by_name(pushing)["registry"]["status"] == "fail", pushing.stdout


def test_tags_json_is_the_tag_set(tmp_path):
    from click.testing import CliRunner

    from buildkit.cli.main import main

    (tmp_path / "buildkit.toml").write_text('schema_version = 1\n[image]\nname = "reg.example/t/l"\n'
                                            'default_variant = "cpu"\n[build]\narch = "cpu"\n')
    commit = "ab" * 20
    result = CliRunner().invoke(main, ["tags", "--config", str(tmp_path / "buildkit.toml"), "--release", "1.2.3",
                                       "--commit", commit, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["repository"] == "reg.example/t/l" and data["commit"] == commit
    assert data["immutable"][:2] == ["1.2.3-cpu", f"sha-{commit[:7]}-cpu"] and "latest" in data["moving"]
