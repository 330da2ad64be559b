"""Smoke checks on a built image (docker-py runs and inspects; nothing is built here).

1. `llama-server --version` (or llama-cli for the light target) runs inside the image and
   reports the pinned commit. This catches a runtime stage that forgot one of llama.cpp's
   shared libraries or a system library they link (OpenSSL, OpenMP).
2. CUDA images: the architectures inside libggml-cuda.so, listed by `cuobjdump --list-elf`
   where a cuobjdump is available, are exactly the requested one.
3. CUDA images with NO_VMM: libggml-cuda.so does not need libcuda.so.1.

A check that cannot run here (no cuobjdump; a VMM build that needs the driver library to
start) is reported as skipped with the reason, never as passed.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .errors import VerifyError
from .plan import BuildPlan

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
ELF_ARCH_RE = re.compile(r"\b(sm_\d+[af]?)\b")


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str


@dataclass(frozen=True)
class VerifyReport:
    image: str
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.status != FAILED for c in self.checks)

    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == FAILED]


def _docker_client():
    import docker  # imported here: no work, and no Docker needed, at import time

    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # docker-py raises several types for "no engine"
        raise VerifyError(f"cannot reach the Docker engine to verify the image: {exc}") from None
    return client


def _run(client, image: str, entrypoint: list[str], args: list[str]) -> tuple[int, str]:
    container = client.containers.create(image, entrypoint=entrypoint, command=args, network_disabled=True)
    try:
        container.start()
        result = container.wait(timeout=120)
        output = container.logs(stdout=True, stderr=True).decode(errors="replace")
        return int(result.get("StatusCode", 1)), output
    finally:
        container.remove(force=True)


def _copy_out(client, image: str, path: str, dest: Path) -> None:
    """Copy `path` (a folder) out of the image into dest, symlinks kept."""
    container = client.containers.create(image, entrypoint=["/bin/true"])
    try:
        stream, _ = container.get_archive(path)
        data = io.BytesIO(b"".join(stream))
    finally:
        container.remove(force=True)
    with tarfile.open(fileobj=data) as tar:
        tar.extractall(dest, filter="data")


def check_version(client, plan: BuildPlan, image: str) -> Check:
    binary = "/app/llama-cli" if plan.request.target == "light" else "/app/llama-server"
    code, output = _run(client, image, [binary], ["--version"])
    text = output.strip()
    missing = re.search(r"error while loading shared libraries: ([^:]+)", text)
    if missing:
        return Check("version", FAILED, f"{binary} cannot start: shared library {missing.group(1)} "
                                        "is missing from the runtime stage")
    commit = plan.source.commit
    if code != 0:
        return Check("version", FAILED, f"{binary} --version exited {code}: {text.splitlines()[-1:]}")
    if commit not in text and commit[:7] not in text:
        return Check("version", FAILED, f"{binary} --version does not report commit {commit[:12]}: "
                                        f"{text.splitlines()[:1]}")
    line = next((ln for ln in text.splitlines() if ln.startswith("version:")), text.splitlines()[0])
    return Check("version", PASSED, line.strip())


def find_cuobjdump(extra_dirs: list[Path] = ()) -> str | None:
    """cuobjdump from PATH, $CUDA_HOME, the given CUDA roots, or /usr/local/cuda."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    candidates = [Path(os.environ["CUDA_HOME"]) / "bin"] if os.environ.get("CUDA_HOME") else []
    candidates += [Path(d) / "bin" for d in extra_dirs] + [Path("/usr/local/cuda/bin")]
    for directory in candidates:
        path = directory / "cuobjdump"
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def needed_libraries(path: Path) -> list[str]:
    """DT_NEEDED entries of an ELF shared library."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    with path.open("rb") as fh:
        elf = ELFFile(fh)
        needed: list[str] = []
        for section in elf.iter_sections():
            if isinstance(section, DynamicSection):
                needed += [tag.needed for tag in section.iter_tags() if tag.entry.d_tag == "DT_NEEDED"]
        return needed


def elf_archs(cuobjdump: str, library: Path) -> set[str]:
    proc = subprocess.run([cuobjdump, "--list-elf", str(library)], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise VerifyError(f"cuobjdump --list-elf {library.name} failed: {proc.stderr.strip()[:200]}")
    return set(ELF_ARCH_RE.findall(proc.stdout))


def _cuda_library(lib_dir: Path) -> Path | None:
    candidates = sorted(p for p in lib_dir.rglob("libggml-cuda.so*") if p.is_file() and not p.is_symlink())
    return candidates[0] if candidates else None


def check_cuda_library(client, plan: BuildPlan, image: str, cuda_roots: list[Path]) -> list[Check]:
    checks: list[Check] = []
    with tempfile.TemporaryDirectory(prefix="buildkit-verify-") as tmp:
        _copy_out(client, image, "/app/lib", Path(tmp))
        library = _cuda_library(Path(tmp))
        if library is None:
            return [Check("cuda-library", FAILED, "libggml-cuda.so is not in /app/lib of the image")]
        needed = needed_libraries(library)
        needs_driver = "libcuda.so.1" in needed
        if plan.request.no_vmm and needs_driver:
            checks.append(Check("no-vmm", FAILED, f"{library.name} needs libcuda.so.1 although built with "
                                                  "GGML_CUDA_NO_VMM=ON"))
        elif plan.request.no_vmm:
            checks.append(Check("no-vmm", PASSED, f"{library.name} does not need libcuda.so.1"))
        else:
            checks.append(Check("vmm", PASSED if needs_driver else FAILED,
                                f"{library.name} {'needs' if needs_driver else 'does not need'} libcuda.so.1 "
                                "(VMM build, linked against the stub)"))
        cuobjdump = find_cuobjdump(cuda_roots)
        expected = {plan.arch.elf_arch}
        if cuobjdump is None:
            checks.append(Check("cuda-archs", SKIPPED, "no cuobjdump on this machine (PATH, CUDA_HOME, "
                                                       "/usr/local/cuda); install nvidia-cuda-cuobjdump"))
        else:
            found = elf_archs(cuobjdump, library)
            status = PASSED if found == expected else FAILED
            checks.append(Check("cuda-archs", status, f"cuobjdump lists {', '.join(sorted(found)) or 'nothing'}; "
                                                      f"expected {', '.join(sorted(expected))}"))
    return checks


def verify_image(plan: BuildPlan, image: str, *, cuda_roots: list[Path] = ()) -> VerifyReport:
    client = _docker_client()
    checks: list[Check] = []
    if plan.arch.is_cuda:
        checks += check_cuda_library(client, plan, image, list(cuda_roots))
    vmm_needs_driver = any(c.name == "vmm" and c.status == PASSED for c in checks)
    if vmm_needs_driver:
        checks.append(Check("version", SKIPPED, "a VMM build needs the NVIDIA driver's libcuda.so.1 to start; "
                                                "no driver here"))
    else:
        checks.append(check_version(client, plan, image))
    return VerifyReport(image=image, checks=tuple(checks))
