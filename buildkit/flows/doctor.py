"""`buildkit doctor`: is this machine ready for the build it is configured for?

Each check gives one line: ok, warn or fail, what was found, and for warn/fail the fix. Checks:

* engine   — the Docker engine answers; its version and image store (containerd keeps an OCI
             archive's bytes, so digests are reproducible; the classic store does not);
* buildx   — the buildx plugin's version, and the builder buildkit will use;
* disk     — free space where the engine keeps images and where buildkit keeps its caches,
             against what the chosen variants need (REQUIRED_GB, or --min-free-gb);
* registry — the registry of image.name answers and accepts the `docker login` credentials;
* driver   — with `nvidia-smi`: the host driver against the CUDA version's minimum, and the GPU
             against the arch the image is built for;
* emulation — a platform other than the host's needs a binfmt_misc handler (QEMU) or a builder
             node of that platform.

`build` runs the cheap ones (engine, disk) before anything else: see `preflight`.
The checks only read; nothing is started, pulled or written.
"""

from __future__ import annotations

import json
import os
import platform as host_platform
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from buildkit.engine.buildx import MIN_BUILDX, check_buildx
from buildkit.core.errors import BuildError, BuildkitError

OK, WARN, FAIL = "ok", "warn", "fail"
MIN_ENGINE = (23, 0)  # BuildKit as the default builder, `docker buildx` integration

# Free disk space (GB) a build needs on the engine's data root, by variant kind: the base images,
# the build stage's layers, the exported archive and the loaded image, plus the ccache mount.
# Figures from this project's builds: a CUDA 13.1 devel image is ~9 GB unpacked, an sm_120 server
# build stage ~6 GB, the archive and the loaded image ~2.5 GB each, ccache up to ~3 GB per arch.
# A cpu build of the real tree stays under 3 GB.
REQUIRED_GB = {"cuda": 25.0, "cpu": 4.0}
EXTRA_VARIANT_GB = {"cuda": 8.0, "cpu": 1.5}  # each further variant of a matrix (bases are shared)

# Minimum host driver per CUDA major, NVIDIA's "CUDA Toolkit 11.x, 12.x, and 13.x Minimum Required
# Driver Versions" table (docs.nvidia.com/deploy/cuda-compatibility, minor version compatibility):
# CUDA 13.x needs >= 580, CUDA 12.x >= 525, CUDA 11.x >= 450. A newer driver always works.
MIN_DRIVER = {13: 580, 12: 525, 11: 450}

BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
# buildx platform arch -> binfmt_misc handler name (what tonistiigi/binfmt and qemu-user-static register)
QEMU_NAMES = {"arm64": "qemu-aarch64", "amd64": "qemu-x86_64", "arm": "qemu-arm", "ppc64le": "qemu-ppc64le",
              "s390x": "qemu-s390x", "riscv64": "qemu-riscv64", "386": "qemu-i386"}
HOST_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64", "ppc64le": "ppc64le",
             "s390x": "s390x", "riscv64": "riscv64"}


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok, warn or fail
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class Variant:
    """What doctor needs to know of one variant of the build."""
    name: str
    cuda: tuple[int, int] | None  # None for cpu
    arch: str  # sm_120 or cpu
    platform: str  # linux/amd64


def _run(argv: Sequence[str], timeout: float = 30) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def version_tuple(text: str) -> tuple[int, ...]:
    """'26.1.5+dfsg1' -> (26, 1, 5); '580.65.06' -> (580, 65, 6); '' -> ()."""
    match = re.match(r"v?(\d+(?:\.\d+)*)", text.strip())
    return tuple(int(p) for p in match.group(1).split(".")) if match else ()


# --------------------------------------------------------------------------- engine

def engine_info(docker: str = "docker") -> tuple[dict | None, str]:
    """(docker info as a dict, "") when the engine answers, else (None, why)."""
    from buildkit.engine.api import EngineError, get_engine

    try:
        return get_engine(docker).info(), ""
    except EngineError as exc:
        return None, str(exc)


def check_engine(info: dict | None, why: str) -> Check:
    if info is None:
        where = os.environ.get("DOCKER_HOST") or "the default socket (or the current docker context)"
        return Check("engine", FAIL, f"no Docker engine at {where}: {why}",
                     "start the engine (`sudo systemctl start docker`), or point DOCKER_HOST / "
                     "`docker context use` at one that runs")
    version = info.get("ServerVersion", "")
    store = "containerd" if "io.containerd.snapshotter" in json.dumps(info.get("DriverStatus")) else "classic"
    detail = f"Docker {version}, {store} image store, data root {info.get('DockerRootDir') or '?'}"
    if version_tuple(version)[:2] < MIN_ENGINE:
        return Check("engine", FAIL, detail, f"upgrade Docker Engine to {'.'.join(map(str, MIN_ENGINE))} or newer")
    if store == "classic":
        return Check("engine", WARN, detail + " (digests are not reproducible on the classic store)",
                     'enable the containerd image store: {"features": {"containerd-snapshotter": true}} in '
                     "/etc/docker/daemon.json, then restart dockerd")
    return Check("engine", OK, detail)


# --------------------------------------------------------------------------- buildx

def check_buildx_and_builder(builder: str, docker: str = "docker") -> tuple[Check, list[str]]:
    """The buildx check, and the builder's platforms (for the emulation check)."""
    try:
        version = check_buildx(docker)
    except BuildError as exc:
        return Check("buildx", FAIL, str(exc), "install the docker-buildx plugin "
                     f"({'.'.join(map(str, MIN_BUILDX))} or newer): the docker-buildx package, or "
                     "https://github.com/docker/buildx/releases into ~/.docker/cli-plugins/"), []
    from buildkit.engine.api import EngineError, get_engine

    shown = builder or "the current builder"
    try:
        described = get_engine(docker).inspect_builder(builder)
    except EngineError as exc:
        why = str(exc)
        return Check("buildx", FAIL, f"buildx {'.'.join(map(str, version))}; {shown}: {why}",
                     "list the builders with `docker buildx ls`; create one with `docker buildx create --name "
                     f"{builder or 'NAME'} [--driver docker-container]`, or leave build.builder empty"), []
    fields = dict(_inspect_fields(described))
    platforms = [p.strip().rstrip("*") for p in fields.get("Platforms", "").split(",") if p.strip()]
    name = fields.get("Name", builder or "default")
    driver = fields.get("Driver", "?")
    status = fields.get("Status", "")
    detail = f"buildx {'.'.join(map(str, version))}; builder {name} (driver {driver}" + \
        (f", {status}" if status else "") + ")"
    if status and status not in ("running", "inactive"):
        return Check("buildx", FAIL, detail, f"`docker buildx inspect --bootstrap {name}`, or remove and "
                     "re-create the builder"), platforms
    return Check("buildx", OK, detail), platforms


def _inspect_fields(text: str) -> Iterable[tuple[str, str]]:
    """`docker buildx inspect` output: 'Key: value' lines (the first of each key wins)."""
    seen: set[str] = set()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip()
        if sep and key and key not in seen and not line.startswith(" "):
            seen.add(key)
            yield key, value.strip()


# --------------------------------------------------------------------------- disk

def required_gb(variants: Sequence[Variant]) -> float:
    """Free space the variants need together: the first of each kind in full, each further one of
    that kind its build stage and image (it shares the base images)."""
    need = 0.0
    for kind in ("cuda", "cpu"):
        count = sum(1 for v in variants if (v.cuda is not None) == (kind == "cuda"))
        if count:
            need += REQUIRED_GB[kind] + EXTRA_VARIANT_GB[kind] * (count - 1)
    return need


def free_gb(path: Path) -> float | None:
    """Free space (GB) of the file system that holds path (or its nearest existing parent)."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free / 1e9
    except OSError:
        return None


def check_disk(places: Sequence[tuple[str, Path]], need_gb: float, origin: str) -> Check:
    """Each place's free space against need_gb; places on one file system are counted once."""
    seen: dict[int, str] = {}
    found: list[str] = []
    short: list[str] = []
    unknown: list[str] = []
    for label, path in places:
        free = free_gb(path)
        if free is None:
            unknown.append(f"{label} {path}")
            continue
        try:
            dev = os.stat(_existing(path)).st_dev
        except OSError:
            dev = -1
        if dev in seen:
            continue
        seen[dev] = label
        found.append(f"{free:.1f} GB free at {path} ({label})")
        if free < need_gb:
            short.append(f"{path} ({label})")
    detail = "; ".join(found) or "no folder could be measured"
    detail += f"; need {need_gb:g} GB ({origin})"
    if unknown:
        detail += f"; cannot measure {', '.join(unknown)}"
    if short:
        return Check("disk", FAIL, detail, f"free space on {', '.join(short)}: `docker image prune` (your own "
                     "images), `docker buildx prune --keep-storage 20GB`, move cache.dir to a larger disk, or "
                     "set --min-free-gb if you know the build needs less")
    if unknown and not found:
        return Check("disk", WARN, detail, "check free space by hand (`df -h`)")
    return Check("disk", OK, detail)


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


# --------------------------------------------------------------------------- registry

def check_registry(image_name: str, *, env=None, timeout: float = 10) -> Check:
    """The registry of image.name answers and lets the stored credentials read the repository."""
    from buildkit.core.errors import AuthError, RegistryError
    from buildkit.oci.imageref import parse_image_ref
    from buildkit.oci.registry import client_for

    try:
        ref = parse_image_ref(image_name)
    except BuildkitError as exc:
        return Check("registry", FAIL, str(exc), "set image.name to [registry/]repository, e.g. "
                     "ghcr.io/you/buun-llama-cpp")
    first = image_name.split("/", 1)[0]
    explicit = "/" in image_name and ("." in first or ":" in first or first == "localhost")
    if not explicit:
        return Check("registry", WARN, f"image.name {image_name!r} names no registry (it would go to Docker Hub "
                     "as docker.io/" + ref.repository + "); not contacted",
                     "to publish, set image.name to REGISTRY/REPOSITORY (ghcr.io/you/name, localhost:5000/name)")
    try:
        with client_for(ref.registry, env, timeout=timeout, retries=0) as client:
            who = client.credentials.describe() if client.credentials else "anonymous"
            client.list_tags(ref.repository)
    except AuthError as exc:
        return Check("registry", FAIL, str(exc), f"`docker login {ref.registry}` with a user that may push to "
                     f"{ref.repository} (buildkit reads the credentials docker stores)")
    except RegistryError as exc:
        return Check("registry", FAIL, str(exc), f"check that {ref.registry} is up and reachable from here "
                     "(proxy, TLS CA in /etc/docker/certs.d/HOST/ca.crt); `buildkit build` without --push "
                     "does not need it")
    return Check("registry", OK, f"{ref.registry} answers; {ref.repository} readable as {who}")


# --------------------------------------------------------------------------- host driver

def min_driver(cuda: tuple[int, int]) -> int | None:
    return MIN_DRIVER.get(cuda[0])


def parse_nvidia_smi(text: str) -> list[tuple[str, str, str]]:
    """`nvidia-smi --query-gpu=driver_version,name,compute_cap --format=csv,noheader` rows."""
    rows = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and version_tuple(parts[0]):
            rows.append((parts[0], parts[1], parts[2]))
    return rows


def judge_driver(rows: Sequence[tuple[str, str, str]], variants: Sequence[Variant]) -> Check:
    """Pure: the host's GPUs and driver against the CUDA variants to be run here."""
    cuda_variants = [v for v in variants if v.cuda is not None]
    if not rows:
        return Check("driver", WARN, "nvidia-smi found no GPU", "check the driver: `nvidia-smi`")
    driver = rows[0][0]
    gpus = ", ".join(f"{name} (sm_{cap.replace('.', '')})" for _, name, cap in rows)
    detail = f"driver {driver}; {gpus}"
    if not cuda_variants:
        return Check("driver", OK, detail + "; cpu variant: no driver needed")
    too_old = []
    for v in cuda_variants:
        need = min_driver(v.cuda)  # type: ignore[arg-type]
        if need is not None and version_tuple(driver)[:1] < (need,):
            too_old.append((f"{v.cuda[0]}.{v.cuda[1]}", need))  # type: ignore[index]
    if too_old:
        need = max(n for _, n in too_old)
        versions = ", ".join(sorted({c for c, _ in too_old}))
        return Check("driver", FAIL, f"{detail}; CUDA {versions} needs driver >= {need}",
                     f"install NVIDIA driver {need} or newer on this host, or build with an older --cuda "
                     "(CUDA 12.x runs on >= 525)")
    caps = {"sm_" + cap.replace(".", "") for _, _, cap in rows}
    archs = {v.arch for v in cuda_variants}
    if caps and not caps & archs:
        return Check("driver", WARN, f"{detail}; the image is built for {', '.join(sorted(archs))}: on this GPU it "
                     "stops with \"no kernel image is available\"",
                     f"build with --arch {sorted(caps)[0]} to run it here")
    return Check("driver", OK, detail)


def check_driver(variants: Sequence[Variant]) -> Check:
    if not any(v.cuda for v in variants):
        return Check("driver", OK, "cpu variant: no GPU driver needed")
    if shutil.which("nvidia-smi") is None:
        need = sorted({min_driver(v.cuda) for v in variants if v.cuda and min_driver(v.cuda)})
        return Check("driver", OK, "no nvidia-smi here: fine for building; the host that runs the image needs "
                     f"driver >= {need[-1] if need else '?'}")
    proc = _run(["nvidia-smi", "--query-gpu=driver_version,name,compute_cap", "--format=csv,noheader"])
    if proc is None or proc.returncode != 0:
        why = "timed out" if proc is None else _last_line(proc.stderr or proc.stdout)
        return Check("driver", WARN, f"nvidia-smi failed: {why}", "check the NVIDIA driver installation")
    return judge_driver(parse_nvidia_smi(proc.stdout), variants)


# --------------------------------------------------------------------------- emulation

def binfmt_handlers(root: Path = BINFMT_DIR) -> list[str] | None:
    """The enabled binfmt_misc handlers; None when binfmt_misc is not mounted."""
    try:
        entries = [p for p in root.iterdir() if p.name not in ("register", "status")]
    except OSError:
        return None
    if not (root / "register").exists():
        return None
    enabled = []
    for entry in entries:
        try:
            if entry.read_text().startswith("enabled"):
                enabled.append(entry.name)
        except OSError:
            continue
    return sorted(enabled)


def judge_emulation(platforms: Sequence[str], host_arch: str, handlers: list[str] | None,
                    builder_platforms: Sequence[str]) -> Check:
    """Pure: can every wanted platform be built here (natively, by the builder, or through QEMU)?"""
    shown = "binfmt_misc not mounted" if handlers is None else \
        f"binfmt handlers: {', '.join(handlers) if handlers else 'none'}"
    missing = []
    for plat in platforms:
        arch = plat.split("/")[1] if "/" in plat else plat
        if arch == host_arch:
            continue
        if any(bp.startswith(plat) for bp in builder_platforms):
            continue
        if handlers and QEMU_NAMES.get(arch) in handlers:
            continue
        missing.append(plat)
    detail = f"host {host_arch}; builds {', '.join(platforms)}; {shown}"
    if missing:
        arches = ",".join(p.split("/")[-1] for p in missing)
        return Check("emulation", FAIL, detail + f"; nothing here can run {', '.join(missing)}",
                     f"`docker run --privileged --rm tonistiigi/binfmt --install {arches}` (QEMU; a CUDA build "
                     "under emulation takes many hours), or a builder with a native node: "
                     "`docker buildx create --append --name B ssh://arm64-host`")
    return Check("emulation", OK, detail)


def check_emulation(variants: Sequence[Variant], builder_platforms: Sequence[str]) -> Check:
    host = HOST_ARCH.get(host_platform.machine(), host_platform.machine())
    platforms = sorted({v.platform for v in variants})
    return judge_emulation(platforms, host, binfmt_handlers(), builder_platforms)


# --------------------------------------------------------------------------- running them

def _variant(req) -> Variant:
    from buildkit.plan.archs import parse_cuda_version

    cuda = parse_cuda_version(req.cuda_version) if req.cuda_version else None
    return Variant(req.variant, cuda, req.arch.name, req.platform)


def variants_of(cfg, matrix: bool = False) -> list[Variant]:
    """The variant of the configured build, or (matrix) every variant of the nightly matrix."""
    from buildkit.plan.buildplan import make_request

    if not matrix:
        return [_variant(make_request(cfg))]
    from buildkit.plan.matrix import matrix_variants

    return [_variant(v.request) for v in matrix_variants(cfg)[0]]


def disk_places(info: dict | None, cache: Path) -> list[tuple[str, Path]]:
    places = []
    root = (info or {}).get("DockerRootDir")
    # a remote engine's data root is not on this machine: only a local socket's can be measured
    host = os.environ.get("DOCKER_HOST", "")
    if root and (not host or host.startswith("unix://")) and Path(root).exists():
        places.append(("engine data root", Path(root)))
    places.append(("cache.dir", cache))
    return places


def run_checks(cfg, *, min_free_gb: float | None = None, matrix: bool = False, offline: bool = False,
               cheap_only: bool = False, docker: str = "docker") -> list[Check]:
    """Every check, in the order of the screen. cheap_only: engine and disk (what `build` runs first)."""
    from buildkit.flows.pipeline import cache_root

    checks: list[Check] = []
    try:
        variants = variants_of(cfg, matrix)
    except BuildkitError as exc:
        return [Check("config", FAIL, str(exc), "fix the setting named (see `buildkit config`)")]
    info, why = engine_info(docker)
    checks.append(check_engine(info, why))
    need = min_free_gb if min_free_gb is not None else required_gb(variants)
    kinds = "+".join(sorted({"cuda" if v.cuda else "cpu" for v in variants}))
    origin = "--min-free-gb" if min_free_gb is not None else f"{len(variants)} {kinds} variant(s)"
    checks.append(check_disk(disk_places(info, cache_root(cfg)), need, origin))
    if cheap_only:
        return checks
    if info is not None:
        buildx, builder_platforms = check_buildx_and_builder(cfg["build.builder"], docker)
    else:
        buildx, builder_platforms = Check("buildx", WARN, "not checked: no engine", "fix the engine first"), []
    checks.insert(1, buildx)
    if offline:
        checks.append(Check("registry", OK, "not contacted (--offline)"))
    else:
        checks.append(check_registry(cfg["image.name"]))
    checks.append(check_driver(variants))
    checks.append(check_emulation(variants, builder_platforms))
    return checks


def failed(checks: Sequence[Check]) -> list[Check]:
    return [c for c in checks if c.status == FAIL]


def format_checks(checks: Sequence[Check]) -> list[str]:
    """One line per check: status, name, what was found, and the fix."""
    width = max((len(c.name) for c in checks), default=0)
    lines = []
    for c in checks:
        line = f"{c.status:<4}  {c.name:<{width}}  {c.detail}"
        if c.fix and c.status != OK:
            line += f" -> fix: {c.fix}"
        lines.append(line)
    return lines


def as_json(checks: Sequence[Check]) -> dict:
    return {"ok": not failed(checks), "checks": [asdict(c) for c in checks]}


def preflight(cfg, *, min_free_gb: float | None = None, matrix: bool = False,
              echo: Callable[[str], None] | None = None) -> None:
    """`build`'s first step: engine and disk. A failure stops the build with its fix in one line."""
    checks = run_checks(cfg, min_free_gb=min_free_gb, matrix=matrix, cheap_only=True)
    bad = failed(checks)
    if echo is not None:
        for line in format_checks([c for c in checks if c.status == WARN]):
            echo(line)
    if bad:
        c = bad[0]
        raise BuildError(f"{c.name}: {c.detail}; fix: {c.fix} (all checks: `buildkit doctor`; "
                         "skip with --no-preflight)")
