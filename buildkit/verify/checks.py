"""Smoke checks on a built image (the engine runs and copies out: engine/api.py; nothing is built here).

1. `llama-server --version` (or llama-cli for the light target) runs inside the image and
   reports the pinned commit. This catches a runtime stage that forgot one of llama.cpp's
   shared libraries or a system library they link (OpenSSL, OpenMP).
2. CUDA images: the architectures inside libggml-cuda.so, listed by `cuobjdump --list-elf`
   where a cuobjdump is available, are exactly the requested one.
3. CUDA images with NO_VMM: libggml-cuda.so does not need libcuda.so.1.
4. The CPU backend (build.cpu_level, see cpulevels.py): /app/lib holds exactly the libraries of
   the level (every libggml-cpu-<variant>.so for `all`, one libggml-cpu.so otherwise); each one's
   disassembly (objdump) holds the vector code of its level and none above it (no ymm in x64, zmm
   in skylakex); and `--list-devices` in the image, on this machine, keeps loaded the variant that ggml's
   own score picks for this CPU (the dynamic loader's trace says which: loadertrace.py).
5. Without running anything of the image (elfcheck.py, on its files exported from the engine):
   every ELF file under /app is of build.platform's machine, and every NEEDED library resolves
   inside the image.

A check that cannot run here (no cuobjdump; a VMM build that needs the driver library to
start; an image of another CPU where no binfmt handler can emulate it, see binfmt.py) is
reported as skipped with the reason, never as passed.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from buildkit.verify import binfmt, cpucode, elfcheck, loadertrace

from buildkit.plan import cpulevels
from buildkit.verify.cpuhost import cpu_flags, host_cpu_flags, host_platform_arch
from buildkit.core.paths import cache_dir
from buildkit.core.errors import BuildkitError, VerifyError
from buildkit.core.treewalk import files_below
from buildkit.engine.api import Engine, EngineError
from buildkit.plan.plantypes import BuildPlan
from buildkit.plan.platforms import cpu_arch, machine_platform
from buildkit.verify.imagetree import ImageTree, exported
from buildkit.core.check import Check, Status
from buildkit.verify.report import VerifyReport

ELF_ARCH_RE = re.compile(r"\b(sm_\d+[af]?)\b")


def cpu_code_cache() -> Path:
    """Where the CPU code counts of the backends verify has seen are kept, by content (cpucode._cache_key)."""
    return cache_dir() / "verify" / "cpu-code"


def _reachable(engine: Engine) -> Engine:
    try:
        engine.ping()
    except EngineError as exc:
        raise VerifyError(f"cannot verify the image: {exc}") from None
    return engine


def check_version(engine: Engine, plan: BuildPlan, image: str) -> Check:
    binary = "/app/llama-cli" if plan.request.target == "light" else "/app/llama-server"
    code, output = engine.run(image, [binary], ["--version"])
    text = output.strip()
    missing = re.search(r"error while loading shared libraries: ([^:]+)", text)
    if missing:
        return Check("version", Status.FAILED, f"{binary} cannot start: shared library {missing.group(1)} "
                                               "is missing from the runtime stage")
    commit = plan.source.commit
    if code != 0:
        return Check("version", Status.FAILED, f"{binary} --version exited {code}: {text.splitlines()[-1:]}")
    if commit not in text and commit[:7] not in text:
        return Check("version", Status.FAILED, f"{binary} --version does not report commit {commit[:12]}: "
                                               f"{text.splitlines()[:1]}")
    line = next((ln for ln in text.splitlines() if ln.startswith("version:")), text.splitlines()[0])
    return Check("version", Status.PASSED, line.strip())


def find_cuobjdump(extra_dirs: Sequence[Path] = ()) -> str | None:
    """cuobjdump from PATH, $CUDA_HOME, the given CUDA roots, or /usr/local/cuda: the first one built for
    this machine's CPU (a cross build's roots hold the build machine's and the target's toolkits, and an
    emulated build machine's cuobjdump does not run here)."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    candidates = [Path(os.environ["CUDA_HOME"]) / "bin"] if os.environ.get("CUDA_HOME") else []
    candidates += [Path(d) / "bin" for d in extra_dirs] + [Path("/usr/local/cuda/bin")]
    machine = cpu_arch(machine_platform()).elf_machine
    for directory in candidates:
        path = directory / "cuobjdump"
        if path.is_file() and os.access(path, os.X_OK) and _elf_machine(path) in (machine, None):
            return str(path)
    return None


def _elf_machine(path: Path) -> int | None:
    """e_machine of an ELF file (little-endian, as on every CPU buildkit builds for); None when not ELF."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(20)
    except OSError:
        return None
    return int.from_bytes(head[18:20], "little") if head[:4] == b"\x7fELF" and len(head) == 20 else None


def needed_libraries(path: Path) -> list[str]:
    """DT_NEEDED entries of an ELF shared library."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    with path.open("rb") as fh:
        elf = ELFFile(fh)
        needed: list[str] = []
        for section in elf.iter_sections():
            if isinstance(section, DynamicSection):
                # pyelftools sets `needed` on a DT_NEEDED tag at run time
                needed += [tag.needed for tag in section.iter_tags()  # type: ignore[attr-defined]
                           if tag.entry.d_tag == "DT_NEEDED"]
        return needed


def elf_archs(cuobjdump: str, library: Path) -> set[str]:
    proc = subprocess.run([cuobjdump, "--list-elf", str(library)], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise VerifyError(f"cuobjdump --list-elf {library.name} failed: {proc.stderr.strip()[:200]}")
    return set(ELF_ARCH_RE.findall(proc.stdout))


def _cuda_library(lib_dir: Path) -> Path | None:
    candidates = sorted(p for p in files_below(lib_dir)
                        if fnmatch.fnmatchcase(p.name, "libggml-cuda.so*") and p.is_file() and not p.is_symlink())
    return candidates[0] if candidates else None


@contextmanager
def app_lib(engine: Engine, image: str, lib_dir: Path | None) -> Iterator[Path]:
    """The image's /app/lib: lib_dir (the image's files, already read from its archive) when it is
    there, else a copy out of the engine (removed afterwards)."""
    if lib_dir is not None and lib_dir.is_dir():
        yield lib_dir
        return
    with tempfile.TemporaryDirectory(prefix="buildkit-verify-") as tmp:
        engine.copy_out(image, "/app/lib", Path(tmp))
        yield Path(tmp)


def check_cuda_library(engine: Engine, plan: BuildPlan, image: str, cuda_roots: list[Path],
                       lib_dir: Path | None = None) -> list[Check]:
    checks: list[Check] = []
    with app_lib(engine, image, lib_dir) as libs:
        library = _cuda_library(libs)
        if library is None:
            return [Check("cuda-library", Status.FAILED, "libggml-cuda.so is not in /app/lib of the image")]
        needed = needed_libraries(library)
        needs_driver = "libcuda.so.1" in needed
        if plan.request.no_vmm and needs_driver:
            checks.append(Check("no-vmm", Status.FAILED, f"{library.name} needs libcuda.so.1 although built with "
                                                         "GGML_CUDA_NO_VMM=ON"))
        elif plan.request.no_vmm:
            checks.append(Check("no-vmm", Status.PASSED, f"{library.name} does not need libcuda.so.1"))
        else:
            checks.append(Check("vmm", Status.PASSED if needs_driver else Status.FAILED,
                                f"{library.name} {'needs' if needs_driver else 'does not need'} libcuda.so.1 "
                                "(VMM build, linked against the stub)"))
        cuobjdump = find_cuobjdump(cuda_roots)
        elf_arch = plan.arch.elf_arch
        assert elf_arch is not None  # a CUDA arch's: verify_image checks the CUDA library for those only
        expected = {elf_arch}
        if cuobjdump is None:
            checks.append(Check("cuda-archs", Status.SKIPPED, "no cuobjdump on this machine (PATH, CUDA_HOME, "
                                                              "/usr/local/cuda); install nvidia-cuda-cuobjdump"))
        else:
            found = elf_archs(cuobjdump, library)
            status = Status.PASSED if found == expected else Status.FAILED
            checks.append(Check("cuda-archs", status, f"cuobjdump lists {', '.join(sorted(found)) or 'nothing'}; "
                                                      f"expected {', '.join(sorted(expected))}"))
    return checks


CPU_LIB_RE = re.compile(r"^libggml-cpu(?:-(?P<variant>[A-Za-z0-9_.]+))?\.so(?P<version>\.[0-9.]+)?$")
LOADED_RE = re.compile(r"loaded CPU backend from (?P<path>\S+)")


def cpu_libraries(lib_dir: Path) -> dict[str, Path]:
    """{variant name ('' for plain libggml-cpu.so): file} of the CPU backends in a copied /app/lib."""
    found: dict[str, Path] = {}
    for path in sorted(p for p in files_below(lib_dir) if fnmatch.fnmatchcase(p.name, "libggml-cpu*.so*")):
        match = CPU_LIB_RE.match(path.name)
        if match and path.is_file() and not path.is_symlink():
            found[match.group("variant") or ""] = path
    return found


def expected_backends(plan: BuildPlan) -> tuple[str, ...]:
    """Variant names the level must bring ('' = one plain libggml-cpu.so)."""
    level = plan.request.cpu_level
    if level.all_variants:
        # upstream's lasting variants, and every variant of the platform the tree declares that buildkit knows
        # (the armv9.2 SME ones among them: GCC 14 was installed for them, cpulevels.gcc_needed)
        platform = plan.request.platform
        required = cpulevels.required_variants(platform)
        known = cpulevels.variants_for(platform)
        return required + tuple(n for n, _ in plan.source.cpu_variants if n in known and n not in required)
    return ("",)


def backend_class(plan: BuildPlan, variant: str, host: set[str]) -> str | None:
    """The SIMD class a backend must show; None when it cannot be known (an unknown variant)."""
    platform, level = plan.request.platform, plan.request.cpu_level
    if variant:
        features = cpulevels.variants_for(platform).get(variant)
        return None if features is None else cpulevels.simd_class(features, platform)
    if level.native:
        return cpulevels.simd_class(tuple(sorted(host)), platform)
    return cpulevels.simd_class(cpulevels.level_features(level), platform)


def engine_arch(engine: Engine) -> str:
    """The engine machine's architecture as a platform name (amd64, arm64)."""
    return engine.arch() or host_platform_arch()


def engine_cpu_flags(engine: Engine, image: str, platform: str) -> set[str]:
    """The CPU flags of the machine the engine runs on (the image's own /proc/cpuinfo), else this one's.
    An image of another CPU is never run for it."""
    if cpulevels.platform_arch(platform) != engine_arch(engine):
        return host_cpu_flags()
    code, output = engine.run(image, ["/bin/cat"], ["/proc/cpuinfo"])
    return (cpu_flags(output) if code == 0 else set()) or host_cpu_flags()


def objdump_hint(arch: str) -> str:
    if host_platform_arch() == arch:
        return "install binutils"
    return f"install {cpu_arch(f'linux/{arch}').cross_binutils} (or binutils-multiarch)"


def check_cpu_backends(engine: Engine, plan: BuildPlan, image: str, *, not_run: str = "",
                       lib_dir: Path | None = None) -> list[Check]:
    """not_run: why the image's binaries cannot run here ("" when they can). lib_dir: app_lib's."""
    platform, level = plan.request.platform, plan.request.cpu_level
    arch = cpulevels.platform_arch(platform)
    native = arch == engine_arch(engine)
    host = cpulevels.host_features(engine_cpu_flags(engine, image, platform), platform) if native else set()
    with app_lib(engine, image, lib_dir) as lib_folder:
        libs = cpu_libraries(lib_folder)
        names = sorted(libs)
        shown = ", ".join(libs[n].name for n in names) or "none"
        missing = [v for v in expected_backends(plan) if v not in libs]
        extra = [n for n in names if (n == "") == level.all_variants]
        if missing or extra:
            what = [f"missing {', '.join(f'libggml-cpu-{v}.so' if v else 'libggml-cpu.so' for v in missing)}"] \
                if missing else []
            what += [f"unexpected {', '.join(libs[n].name for n in extra)}"] if extra else []
            return [Check("cpu-backends", Status.FAILED,
                          f"cpu level {level.name}: /app/lib holds {shown}; {'; '.join(what)}")]
        checks = [Check("cpu-backends", Status.PASSED, f"cpu level {level.name}: {shown}")]
        objdump = cpucode.find_objdump(arch)
        if objdump is None:
            checks.append(Check("cpu-code", Status.SKIPPED,
                                f"no objdump for {arch} code on this machine; {objdump_hint(arch)}"))
        else:
            checks.append(_check_code(plan, libs, objdump, host))
    if not_run:
        checks.append(Check("cpu-load", Status.SKIPPED, not_run))
    else:
        checks.append(check_cpu_loaded(engine, plan, image, names, host))
    return checks


def _check_code(plan: BuildPlan, libs: dict[str, Path], objdump: str, host: set[str]) -> Check:
    bad: list[str] = []
    good: list[str] = []
    for name, path in sorted(libs.items()):
        wanted = backend_class(plan, name, host)
        counts = cpucode.disassembly_counts(objdump, path, cache=cpu_code_cache())
        label = name or path.name
        if wanted is None:
            good.append(f"{label}: {cpucode.summary(counts)} (variant unknown to buildkit, not judged)")
            continue
        why = cpucode.problems(wanted, counts)
        shown = cpucode.summary(counts, always=("sme",) if wanted == "sme" else ())
        (bad if why else good).append(f"{label} ({wanted}): {'; '.join(why) if why else shown}")
    if bad:
        return Check("cpu-code", Status.FAILED, "CPU backend without the code of its level: " + " | ".join(bad))
    return Check("cpu-code", Status.PASSED, " | ".join(good))


def check_cpu_loaded(engine: Engine, plan: BuildPlan, image: str, names: list[str], host: set[str]) -> Check:
    """`--list-devices` loads the backends (ggml_backend_load_all); the CPU backend still loaded at its exit is
    the one ggml chose, and must be the one its score picks for this CPU."""
    platform, level = plan.request.platform, plan.request.cpu_level
    if cpulevels.platform_arch(platform) != engine_arch(engine):
        return Check("cpu-load", Status.SKIPPED, f"{platform} image on a {engine_arch(engine)} engine (emulated)")
    if not level.backend_dl:
        return Check("cpu-load", Status.SKIPPED, "cpu level native links libggml-cpu; nothing is chosen at start-up")
    if level.all_variants:
        expected = cpulevels.best_variant([n for n in names if n], host, platform)
        if expected is None:
            return Check("cpu-load", Status.SKIPPED, "no variant in the image runs on this machine's CPU")
        want = f"libggml-cpu-{expected}.so"
    else:
        need = cpulevels.level_features(level)
        lacking = [f for f in need if f not in host]
        if lacking:
            return Check("cpu-load", Status.SKIPPED,
                         f"this machine lacks {', '.join(lacking)}: the {level.name} backend cannot load here")
        want = "libggml-cpu.so"
    binary = "/app/llama-cli" if plan.request.target == "light" else "/app/llama-server"
    # the loader's trace says which backend stayed loaded (loadertrace.py: llama.cpp's own log line may be
    # lost at exit); an image whose loader prints no trace falls back to that line, logged from -lv 10 on
    code, output = engine.run(image, [binary], ["-lv", "10", "--list-devices"], env=loadertrace.TRACE_ENV)
    mapped = loadertrace.mapped_at_exit(output, "libggml-cpu")
    match = LOADED_RE.search(output)
    if mapped is None or (len(mapped) > 1 and match and match.group("path") in mapped):
        mapped = [match.group("path")] if match else []  # no trace, or a ggml that keeps every variant it scored
    if len(mapped) != 1:
        said = loadertrace.program_lines(output)[-3:]
        what = f"kept {len(mapped)} CPU backends loaded ({', '.join(mapped)})" if mapped else "loaded no CPU backend"
        return Check("cpu-load", Status.FAILED, f"{binary} --list-devices (exit {code}) {what}: {said}")
    loaded = mapped[0]
    if Path(loaded).name != want:
        return Check("cpu-load", Status.FAILED, f"loaded {loaded}; this machine's best is {want}")
    return Check("cpu-load", Status.PASSED, f"loaded {loaded} (the best for this CPU)")


def check_files(plan: BuildPlan, tree: ImageTree) -> list[Check]:
    """The checks that read the image's files and run nothing of it (elfcheck.py)."""
    files = elfcheck.elf_files(tree)
    return [elfcheck.check_elf_machine(plan, tree, files), elfcheck.check_needed(plan, tree, files)]


def _header(tree: ImageTree | None, plan: BuildPlan) -> bytes:
    """The first bytes of the program the checks would run (a made-up header when it cannot be read)."""
    binary = "/app/llama-cli" if plan.request.target == "light" else "/app/llama-server"
    if tree is not None:
        try:
            with open(tree.host(binary), "rb") as fh:
                return fh.read(128)
        except OSError:
            pass
    return binfmt.elf_header(plan.request.target_cpu.elf_machine)


VMM_NOT_RUN = "a VMM build needs the NVIDIA driver's libcuda.so.1 to start; no driver here"


def verify_image(plan: BuildPlan, image: str, engine: Engine, *, cuda_roots: Sequence[Path] = (),
                 archive: Path | None = None) -> VerifyReport:
    """archive: the OCI archive the build exported that image to (its files are read from it)."""
    engine = _reachable(engine)
    with ExitStack() as stack:
        checks: list[Check] = []
        header = _header(None, plan)
        tree: ImageTree | None = None
        try:
            tree = stack.enter_context(exported(engine, image, plan.request.platform, archive))
            checks += check_files(plan, tree)
            header = _header(tree, plan)
        except BuildkitError as exc:  # the engine's or the archive's own message
            checks.append(Check("elf-machine", Status.FAILED, f"cannot read the image's files: {exc}"))
        return _run_checks(engine, plan, image, checks, header, _lib_dir(tree), cuda_roots)


def _lib_dir(tree: ImageTree | None) -> Path | None:
    """The image's /app/lib as read for the file checks (None: app_lib copies it out of the engine)."""
    try:
        return tree.host("/app/lib") if tree is not None else None
    except BuildkitError:
        return None


def _run_checks(engine: Engine, plan: BuildPlan, image: str, checks: list[Check], header: bytes, lib_dir: Path | None,
                cuda_roots: Sequence[Path]) -> VerifyReport:
    """verify_image's checks after the file checks: the CUDA library, the CPU backends, the version."""
    if plan.arch.is_cuda:
        checks += check_cuda_library(engine, plan, image, list(cuda_roots), lib_dir)
    vmm_needs_driver = any(c.name == "vmm" and c.status == Status.PASSED for c in checks)
    handlers = binfmt.registered()
    not_run = VMM_NOT_RUN if vmm_needs_driver else binfmt.not_runnable(plan.request.platform, engine_arch(engine),
                                                                     header, handlers)
    checks += check_cpu_backends(engine, plan, image, not_run=not_run, lib_dir=lib_dir)
    if not_run:
        checks.append(Check("version", Status.SKIPPED, not_run))
    else:
        version = check_version(engine, plan, image)
        foreign = plan.request.target_cpu.docker != engine_arch(engine)
        emulator = binfmt.handler_for(header, handlers) if foreign else None
        if emulator is not None and version.status == Status.PASSED:
            version = Check("version", Status.PASSED, f"{version.detail} (emulated: {emulator.interpreter})")
        checks.append(version)
    return VerifyReport(image=image, checks=tuple(checks))
