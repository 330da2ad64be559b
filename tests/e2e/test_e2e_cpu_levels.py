"""CPU instruction-set levels on the real llama.cpp source (marker e2e; `make test-e2e`).

The default image is the session's `real_server_image` (tests/realserver.py: `buildkit build --arch cpu`,
cpu level all). The single-level build (session fixture `single_level_build`, also reproduced by
test_reproduce_e2e) runs in the same project with `--cpu-level x86-64-v3`: same source, same ccache
mount (it is per arch, not per level), so only ggml-cpu is compiled again.
What is checked is what the user gets: the files in /app/lib, their disassembly (binutils objdump,
independently of buildkit's own check), the server's start-up log, labels, lock, `buildkit config`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import docker
import pytest

from buildkit.core import ggmlcpu
from buildkit.plan import cpulevels
from buildkit.verify.cpuhost import host_cpu_flags
from cliutil import buildkit_env
from tinymodel import write_tiny_model

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

ROOT = Path(__file__).resolve().parents[2]


def lib_files(client, ref: str, dest: Path) -> dict[str, Path]:
    container = client.containers.create(ref)
    try:
        stream, _ = container.get_archive("/app/lib")
        (dest / "lib.tar").write_bytes(b"".join(stream))
    finally:
        container.remove()
    subprocess.run(["tar", "-xf", str(dest / "lib.tar"), "-C", str(dest)], check=True)
    return {p.name: p for p in (dest / "lib").glob("libggml-cpu*") if p.is_file() and not p.is_symlink()}


def registers(path: Path) -> dict[str, int]:
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(path)], capture_output=True, text=True,
                         check=True).stdout
    return {"ymm": out.count("%ymm"), "zmm": out.count("%zmm"),
            "avx2": len(re.findall(r"\tvp(?:maddubsw|shufb|broadcast[bwdq])\s[^\n]*%ymm", out))}


def config_lines(project: Path, *args: str) -> str:
    env = buildkit_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-m", "buildkit.cli", "config", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def server_log(client, ref: str, model: Path) -> str:
    """Start the real server on the model, wait for /health, return its log (start-up included; llama.cpp
    names the CPU backend file it loaded only at a high log verbosity)."""
    container = client.containers.run(ref, ["--host", "0.0.0.0", "--port", "8080", "--model", "/models/m.gguf",
                                            "--ctx-size", "512", "-lv", "10"], detach=True,
                                      ports={"8080/tcp": ("127.0.0.1", None)},
                                      volumes={str(model): {"bind": "/models/m.gguf", "mode": "ro"}})
    try:
        container.reload()
        url = f"http://127.0.0.1:{container.ports['8080/tcp'][0]['HostPort']}/health"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                time.sleep(0.3)
        else:
            raise AssertionError("server never became healthy: " + container.logs().decode()[-3000:])
        return container.logs(stdout=True, stderr=True).decode(errors="replace")
    finally:
        container.remove(force=True)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("cpu-models") / "tiny.gguf")


@pytest.fixture(scope="module")
def client():
    return docker.from_env()


def test_default_image_holds_every_variant_and_the_server_loads_a_simd_one(real_server_image, model, client,
                                                                            tmp_path):
    libs = lib_files(client, real_server_image.ref, tmp_path)
    wanted = {f"libggml-cpu-{v}.so" for v in ggmlcpu.X86_VARIANTS}
    assert set(libs) == wanted, sorted(libs)
    x64, haswell, skylakex = (registers(libs[f"libggml-cpu-{v}.so"]) for v in ("x64", "haswell", "skylakex"))
    assert x64["ymm"] == 0 and x64["zmm"] == 0
    assert haswell["avx2"] > 100 and haswell["zmm"] == 0
    assert skylakex["zmm"] > 100

    log = server_log(client, real_server_image.ref, model)
    loaded = re.search(r"loaded CPU backend from (\S+)", log)
    assert loaded, log[-3000:]
    variant = Path(loaded.group(1)).name.removeprefix("libggml-cpu-").removesuffix(".so")
    supported = cpulevels.host_features(host_cpu_flags(), "linux/amd64")
    assert variant == cpulevels.best_variant(list(ggmlcpu.X86_VARIANTS), supported, "linux/amd64")
    if "AVX2" in supported:
        assert cpulevels.simd_class(ggmlcpu.X86_VARIANTS[variant], "linux/amd64") in ("avx2", "avx512")
        assert re.search(r"system_info: .*AVX2 = 1", log), log[-3000:]

    labels = client.images.get(real_server_image.ref).attrs["Config"]["Labels"]
    assert labels["org.llama-buildkit.cpu-level"] == "all"
    assert "-DGGML_CPU_ALL_VARIANTS=ON" in labels["org.llama-buildkit.flags"]
    entry = json.loads(real_server_image.lock.read_text())["builds"]["cpu/server"]
    assert entry["cpu_level"] == "all"
    assert json.loads(entry["labels"]["org.llama-buildkit.inputs"])["cpu_level"] == "all"
    assert re.search(r"^build\.cpu_level\s+all\s+\(default;", config_lines(real_server_image.project), re.M)


def test_single_level_build_holds_only_that_level(real_server_image, single_level_build, model, client, tmp_path):
    project, output, entry, ref = (real_server_image.project, single_level_build.output, single_level_build.entry,
                                   single_level_build.ref)
    for check in ("cpu-backends", "cpu-code", "version"):
        assert f"verify {check}: passed" in output, output[-3000:]

    libs = lib_files(client, ref, tmp_path)
    assert set(libs) == {"libggml-cpu.so"}
    code = registers(libs["libggml-cpu.so"])
    assert code["avx2"] > 100 and code["zmm"] == 0

    if "avx2" in host_cpu_flags():
        assert "verify cpu-load: passed" in output
        log = server_log(client, ref, model)
        assert "loaded CPU backend from /app/lib/libggml-cpu.so" in log, log[-3000:]
        assert re.search(r"system_info: .*AVX2 = 1", log) and not re.search(r"AVX512 = 1", log)

    labels = client.images.get(ref).attrs["Config"]["Labels"]
    assert labels["org.llama-buildkit.cpu-level"] == "x86-64-v3"
    assert labels["org.llama-buildkit.variant"] == "cpu-x86-64-v3"
    assert entry["cpu_level"] == "x86-64-v3" and entry["variant"] == "cpu-x86-64-v3"
    assert "-DGGML_AVX2=ON" in entry["cmake_args"] and "-DGGML_AVX512=OFF" in entry["cmake_args"]
    assert re.search(r"^build\.cpu_level\s+x86-64-v3\s+\(--cpu-level;",
                     config_lines(project, "--cpu-level", "x86-64-v3"), re.M)
