"""Cross builds on the real engine (issue 11): the example fork built for another CPU than this
machine's, with no binfmt handler registered, and verified without running anything of it.

The fork is examples/tiny-fork served over git:// (as in test_build_docker.py); the base is the
local OCI index of amd64 and arm64 Debian (tests/images.py), so nothing is pulled.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import docker
import pytest

from cliutil import buildkit_env, write_project

pytestmark = pytest.mark.docker

IMAGE = "buildkit-test/tiny-fork-cross"
BINFMT = Path("/proc/sys/fs/binfmt_misc")
AARCH64_MAGIC = "0200b700"  # e_type 2 and e_machine 183 as a qemu-aarch64 handler's magic ends
NOT_RUN = "linux/arm64 image on a linux/amd64 engine and no binfmt handler for AArch64 registered: not run"


def buildkit(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "buildkit.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=1800)


def aarch64_handlers() -> list[str]:
    """binfmt_misc entries that could run AArch64 programs, read here without buildkit's parser."""
    if not BINFMT.is_dir():
        return []
    found = []
    for entry in BINFMT.iterdir():
        if entry.name in ("register", "status"):
            continue
        text = entry.read_text(errors="replace")
        if "aarch64" in entry.name or "aarch64" in text or AARCH64_MAGIC in text:
            found.append(f"{entry.name}: {text.splitlines()[:2]}")
    return found


def verify_lines(stdout: str) -> dict[str, str]:
    """{check name: 'status: detail'} from `buildkit build`'s `verify NAME: STATUS: DETAIL` lines."""
    lines = {}
    for line in stdout.splitlines():
        if line.startswith("verify "):
            name, _, rest = line[len("verify "):].partition(": ")
            lines[name] = rest
    return lines


@pytest.fixture(scope="module")
def client(docker_engine):
    found = docker.from_env()
    if found.version().get("Arch") != "amd64":
        pytest.skip("these cross builds make arm64 images on an amd64 engine")
    return found


@pytest.fixture(scope="module")
def project(tmp_path_factory, example_fork, multiarch_base_image, client):
    root = tmp_path_factory.mktemp("cross-project")
    write_project(root,
                  source={"url": example_fork["url"], "commit": example_fork["commit"], "patch_dir": "patches"},
                  image={"name": IMAGE, "version": "0.2.0"},
                  build={"jobs": 2},
                  base={"provider": "wheels", "os_image": multiarch_base_image, "cublas": False})
    env = buildkit_env()
    env["LLAMA_BUILDKIT_CACHE_DIR"] = str(tmp_path_factory.getbasetemp() / "buildkit-cache")
    env["LLAMA_BUILDKIT_BUILD_PROGRESS"] = "plain"
    return {"root": root, "env": env, "os_image": multiarch_base_image}


@pytest.fixture(scope="module")
def arm64_cpu_build(project, client):
    """`buildkit build --arch cpu --platform linux/arm64`, once, with no handler that could run arm64 code."""
    handlers = aarch64_handlers()
    if handlers:
        pytest.fail(f"a binfmt handler for AArch64 is registered ({handlers}): a cross build here proves nothing")
    proc = buildkit("build", "--arch", "cpu", "--platform", "linux/arm64", cwd=project["root"], env=project["env"])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    yield proc
    for image in client.images.list(name=IMAGE):
        for tag in image.tags:
            client.images.remove(tag)


def file_from_image(client, ref: str, path: str) -> bytes:
    container = client.containers.create(ref, entrypoint=["/nonexistent"])  # created, never started
    try:
        stream, _ = container.get_archive(path)
    finally:
        container.remove()
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        member = tar.extractfile(tar.getmembers()[0])
        assert member is not None, path  # a file, not a folder
        return member.read()


def test_arm64_cpu_cross_build_is_verified_without_running_it(arm64_cpu_build, client):
    checks = verify_lines(arm64_cpu_build.stdout)
    machine, needed = checks["elf-machine"], checks["needed-libraries"]
    assert machine.startswith("passed: ") and "ELF files under /app are AArch64 64-bit" in machine
    assert needed.startswith("passed: ") and "resolve inside the image" in needed
    assert "interpreter /lib/ld-linux-aarch64.so.1 present" in needed
    assert checks["version"] == f"skipped: {NOT_RUN}"
    assert checks["cpu-load"] == f"skipped: {NOT_RUN}"
    assert checks["cpu-backends"].startswith("passed: ")
    # what the user gets, read without buildkit: an arm64 image whose server is an AArch64 program, under a
    # name of its own (issue 40: it was `:cpu`, the amd64 build's name, which a push would have replaced)
    image = client.images.get(f"{IMAGE}:cpu-arm64")
    assert image.attrs["Architecture"] == "arm64"
    assert f"{IMAGE}:cpu" not in [t for i in client.images.list(name=IMAGE) for t in i.tags]
    header = file_from_image(client, f"{IMAGE}:cpu-arm64", "/app/llama-server")[:20]
    assert header[:5] == b"\x7fELF\x02" and int.from_bytes(header[18:20], "little") == 183


def test_needed_check_names_a_library_missing_from_an_arm64_image(arm64_cpu_build, project, client, tmp_path):
    """An arm64 image whose /app/lib lacks libggml.so (which libllama needs) fails needed-libraries by
    name. It is made from the built one by COPY only: nothing of arm64 runs to make it."""
    from buildkit.flows.unit.pipeline import prepare
    from buildkit.cli.unitspecs import unit_spec
    from buildkit.plan.config import load_config
    from buildkit.core.check import Status
    from buildkit.verify.checks import verify_image
    from buildkit.engine.dockerengine import DockerEngine

    broken = f"{IMAGE}:no-libggml"
    (tmp_path / "Dockerfile").write_text(
        f"FROM {IMAGE}:cpu-arm64 AS built\n"
        f"FROM {project['os_image']}\n"
        "ENV LD_LIBRARY_PATH=/app/lib\n"
        "COPY --from=built /app/llama-server /app/\n"
        "COPY --from=built /app/lib/libllama* /app/lib/libggml-base.so* /app/lib/libggml-cpu-* /app/lib/\n")
    subprocess.run(["docker", "buildx", "build", "--platform", "linux/arm64", "--load", "-t", broken, str(tmp_path)],
                   check=True, capture_output=True)
    try:
        cfg = load_config(project["root"] / "buildkit.toml", env=project["env"],
                          overrides={"build.arch": ("cpu", "test"), "build.platform": ("linux/arm64", "test")})
        plan = prepare(unit_spec(cfg, DockerEngine()), DockerEngine(), tmp_path / "ctx").plan
        report = {c.name: c for c in verify_image(plan, broken, DockerEngine()).checks}
        assert report["elf-machine"].status == Status.PASSED
        needed = report["needed-libraries"]
        assert needed.status == Status.FAILED
        assert "libggml.so.0 (needed by /app/lib/libllama" in needed.detail
        assert report["version"].detail == NOT_RUN
    finally:
        client.images.remove(broken, force=True)
