"""The CUDA toolkit of a provider-wheels build: is the release on the index, and its named contexts.

check_cuda_available asks the package index which CUDA releases exist (the ``cuda-toolkit`` versions it
publishes), so a release NVIDIA shipped today builds and a typo stops before any work with one line
naming the releases there are; when the index cannot be reached it falls back to the arch catalogue's
built-in list, and says so. cuda_contexts gives the CUDA roots as named contexts with their wheel
manifest: laid out (the build), or only resolved from the index's metadata (`--print`, `render`), which
downloads no wheel and gives the same manifest, hence the same build key.
"""

from __future__ import annotations

from typing import Any
import hashlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from buildkit.core.errors import ArchError, CudaRootError, BuildkitError
from buildkit.oci.imageref import parse_image_ref
from buildkit.oci.registry import client_for
from buildkit.plan.archs import CUDA_RELEASES, parse_cuda_version
from buildkit.plan.request import BuildRequest
from buildkit.plan.platforms import Platform
from buildkit.source.cudaroot import (cuda_root_dir, ensure_cuda_root, is_complete, planned_manifest, read_manifest,
                                      runtime_subset)
from buildkit.source.cudawheels import toolkit_releases
from buildkit.source.pyindex import IndexUnreachable, PackageIndex

Contexts = tuple[Path | None, dict[str, Any] | None, tuple[tuple[str, Path], ...]]


@dataclass(frozen=True)
class CudaSettings:
    """What the CUDA toolkit's stages read of the config (cli/unitspecs.py resolves it): the cache the roots and
    the index's metadata live in, a user's own toolkit (base.cuda_root), cuBLAS in the roots (base.cublas), and
    base.devel_image as written (check_nvidia_tag: named per release or not)."""
    cache: Path
    cuda_root: Path | None
    cublas: bool
    devel_image: str


def _say(line: str) -> None:
    print(f"buildkit: {line}", file=sys.stderr, flush=True)


def _versions(releases: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> str:
    return ", ".join(f"{a}.{b}" for a, b in releases)


def check_cuda_available(request: BuildRequest, cuda: CudaSettings, index: PackageIndex | None = None) -> None:
    """A provider-wheels CUDA build's release must be one the index publishes a cuda-toolkit of (ArchError
    naming those of its major version); a user's own base.cuda_root is taken as it is. Provider nvidia:
    see check_nvidia_tag."""
    if request.provider == "nvidia" and request.cuda_version is not None:
        check_nvidia_tag(request, cuda)
    if request.provider != "wheels" or request.cuda_version is None or cuda.cuda_root:
        return
    wanted = parse_cuda_version(request.cuda_version)
    if is_complete(cuda_root_dir(request.cuda_version, cuda.cache, with_cublas=cuda.cublas,
                                 arch=request.build_cpu.processor)):
        return  # laid out before: it exists
    index = index or PackageIndex(cuda.cache)
    try:
        releases = toolkit_releases(index)
    except IndexUnreachable as e:
        if wanted in CUDA_RELEASES:
            _say(f"the package index cannot be reached ({e}); CUDA {request.cuda_version} is in buildkit's "
                 "built-in list of releases, so it goes on (laying it out needs the index or a cached root)")
            return
        raise ArchError(f"CUDA {request.cuda_version} cannot be checked: the package index cannot be reached ({e}), "
                        f"and buildkit's built-in list has {_versions([r for r in CUDA_RELEASES if r[0] >= 13])} "
                        "(choose one, or reach the index)") from None
    for note in index.notes:
        _say(note)
    if wanted not in releases:
        same = [r for r in releases if r[0] == wanted[0]] or releases
        raise ArchError(f"CUDA {request.cuda_version} is not on the package index ({index.describe()}): its "
                        f"cuda-toolkit releases are {_versions(same) or 'none'}; choose one in --cuda or "
                        "build.cuda_version")


def check_nvidia_tag(request: BuildRequest, cuda: CudaSettings) -> None:
    """A release newer than the built-in list, with a devel_image named per release ({cuda_version}, as
    NVIDIA's default): its tag must be in the registry (ArchError naming the releases its tags have); when
    the registry cannot be read, resolving the base image judges, after a line saying so."""
    assert request.cuda_version is not None
    if parse_cuda_version(request.cuda_version) in CUDA_RELEASES or "{cuda_version}" not in cuda.devel_image:
        return

    ref = parse_image_ref(request.devel_image)
    try:
        with client_for(ref.registry, retries=1, deadline=60.0) as client:
            if ref.tag is None or client.head_manifest(ref.repository, ref.tag) is not None:
                return
            tags = client.list_tags(ref.repository)
    except BuildkitError as e:
        _say(f"cannot read the tags of {ref.name} ({e}); CUDA {request.cuda_version} is newer than buildkit's "
             "built-in list: resolving the base image decides")
        return
    suffix = (ref.tag or "").split("-", 1)[-1]
    found = sorted({(int(m.group(1)), int(m.group(2))) for t in tags
                    if (m := re.fullmatch(r"(\d+)\.(\d+)\.\d+-(.+)", t)) and m.group(3) == suffix})
    raise ArchError(f"CUDA {request.cuda_version}: {ref.name} has no tag {ref.tag}; its -{suffix} tags are of CUDA "
                    f"{_versions([v for v in found if v[0] == found[-1][0]]) if found else 'none'}; choose one in "
                    "--cuda or build.cuda_version")


def cuda_manifest(root: Path | None) -> dict[str, Any] | None:
    """The wheels a provider-wheels root was laid out from; a user-given root has none."""
    if root is None:
        return None
    try:
        return read_manifest(root)
    except CudaRootError:
        return {"note": "CUDA root given with base.cuda_root; no wheel manifest"}


def cuda_contexts(request: BuildRequest, cuda: CudaSettings, *, lay_out: bool = True) -> Contexts:
    """(the build machine's CUDA root, the wheel manifest, the named contexts) of provider wheels.

    A cross build gets two roots: cuda-root, the build machine's (nvcc runs there), and cuda-target,
    the target platform's (its libraries are linked and shipped: cuda-runtime is its subset).
    lay_out=False: the roots are named where the build lays them out and their manifest is resolved
    from the index's metadata; no wheel is downloaded."""
    if request.provider != "wheels":
        return None, None, ()
    cuda_version = request.cuda_version
    assert cuda_version is not None
    given = cuda.cuda_root
    if given:
        if request.cross:
            raise CudaRootError(f"base.cuda_root is one folder for one platform; a cross build for {request.platform} "
                                "lays out the build machine's and the target's toolkits from NVIDIA's wheels: unset it")
        root = given.resolve()
        if not (root / "bin" / "nvcc").is_file():
            raise CudaRootError(f"base.cuda_root {root} has no bin/nvcc; point it at a CUDA toolkit folder")
        key = hashlib.sha256(str(root).encode()).hexdigest()[:12]
        runtime_dir = cuda.cache / "cuda-root" / f"local-{key}.runtime"
        runtime = runtime_subset(root, runtime_dir) if lay_out else runtime_dir
        return root, cuda_manifest(root), (("cuda-root", root), ("cuda-runtime", runtime))

    index = PackageIndex(cuda.cache)

    def root_of(cpu: Platform) -> tuple[Path, dict[str, Any] | None]:
        if lay_out:
            laid = ensure_cuda_root(cuda_version, cuda.cache, with_cublas=cuda.cublas, arch=cpu.processor,
                                    index=index)
            return laid, cuda_manifest(laid)
        return (cuda_root_dir(cuda_version, cuda.cache, with_cublas=cuda.cublas, arch=cpu.processor),
                planned_manifest(cuda_version, cuda.cache, with_cublas=cuda.cublas, arch=cpu.processor,
                                 index=index))

    def runtime_of(root: Path) -> Path:
        return runtime_subset(root) if lay_out else root.with_name(root.name + ".runtime")

    root, manifest = root_of(request.build_cpu)
    if not request.cross:
        return root, manifest, (("cuda-root", root), ("cuda-runtime", runtime_of(root)))
    target, target_manifest = root_of(request.target_cpu)
    merged = dict(target_manifest or {})
    merged["wheels"] = list(merged.get("wheels", [])) + list((manifest or {}).get("wheels", []))
    merged["build_arch"] = request.build_cpu.processor
    return root, merged, (("cuda-root", root), ("cuda-target", target), ("cuda-runtime", runtime_of(target)))


def missing_roots(named: tuple[tuple[str, Path | str], ...]) -> list[Path]:
    """The CUDA roots of named contexts that are not laid out yet (a render that downloaded nothing)."""
    return [Path(p) for name, p in named if name in ("cuda-root", "cuda-target") and not is_complete(Path(p))]

