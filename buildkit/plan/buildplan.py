"""Planning (pure): what to build, as data (the types: plan/request.py, plan/plantypes.py).

Two steps. `make_request` checks the resolved config before any work is done (unknown arch,
an arch the CUDA version cannot build, a malformed image name or CMake flag all stop here).
`make_plan` takes what the I/O stages resolved (`Resolved`: the source and patch queue's facts, the base
images' digests, the CUDA root's manifest) and gives the final plan in one go: CMake flags, inputs, build
key, labels, tags (bk-<key> included), the ccache mount. Nothing here touches git, Docker or the network.
"""

from __future__ import annotations

import re
from dataclasses import replace

from buildkit.plan.archs import check_cuda_release, check_cuda_support, check_platform, default_platform, get_arch
from buildkit.plan.config import PLATFORM_FOLLOWS, ResolvedConfig
from buildkit.plan.cpulevels import (cmake_flags as cpu_cmake_flags, compiler_flags, gcc_needed, get_level,
                                     variant_suffix)
from buildkit.plan.aptpins import check_apt_snapshot
from buildkit.core.errors import ConfigError
from buildkit.oci.imageref import InvalidReference, parse_image_ref
from buildkit.plan.buildkey import key_of
from buildkit.plan.inputs import request_inputs
from buildkit.plan.plantypes import BuildPlan, PlanOptions, Resolved
from buildkit.plan.platforms import TOOLCHAIN_PATH, cuda_char_flags, gcc_commands, is_cross, machine_platform
from buildkit.plan.request import BuildRequest, SourceFacts
from buildkit.plan.tags import build_key_tag, build_tags, check_repository, normalise_version, variant


# What may reach a shell line or a FROM line. Values are also shell-quoted in the templates.
# matched with fullmatch: `$` matches before a trailing newline, which would reach the Dockerfile and tags
PLATFORM_RE = re.compile(r"^[a-z0-9]+/[a-z0-9_]+(?:/[a-z0-9]+)?$")
VERSION_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z.+-]*$")
CMAKE_ARG_RE = re.compile(r"^-D[A-Za-z_][A-Za-z0-9_]*(?::[A-Z]+)?=[A-Za-z0-9_.,;:/+=@%-]*$")
SHA_RE = re.compile(r"^[0-9a-f]{40}$")
USER_RE = re.compile(r"^([a-z_][a-z0-9_-]{0,31})(?::([0-9]+))?$")  # a POSIX user name, as useradd takes it
DEFAULT_UID = 10001  # above the ids of system users and of a distribution's first user (ubuntu is 1000)

MAX_JOBS = 4096  # parallel compile jobs (make -j): more is a typo
CUDA_LIB_DIR = "/usr/local/cuda/lib64"  # where the templates put the CUDA libraries to link
TARGET_BINARIES = {"server": ("llama-server",), "light": ("llama-cli",), "full": ()}  # () = everything


def _check_image_ref(name: str, value: str) -> str:
    """value, as written, when it is an image reference by the grammar the build and registry use."""
    try:
        parse_image_ref(value)
    except InvalidReference as exc:
        raise ConfigError(f"{name} {value!r} is not a valid image reference ({exc.why})") from None
    return value


def check_user(value: str) -> str:
    """build.user as NAME:UID ("" = root): a name the passwd file takes and a uid that is not root's."""
    if not value:
        return ""
    match = USER_RE.fullmatch(value)
    if not match:
        raise ConfigError(f"build.user {value!r} is not NAME or NAME:UID (a lower-case user name such as "
                          "llama, optionally with a numeric uid: llama:1001)")
    name, uid = match.group(1), int(match.group(2) or DEFAULT_UID)
    if name == "root" or not 0 < uid < 2**31 - 1:
        raise ConfigError(f"build.user {value!r}: the user must not be root (uid 1 to 2147483646)")
    return f"{name}:{uid}"


def make_request(cfg: ResolvedConfig) -> BuildRequest:
    arch = get_arch(cfg.build.arch)
    cuda_version: str | None = None
    if arch.is_cuda:
        cuda_version = cfg.build.cuda_version
        check_cuda_release(cuda_version)
        check_cuda_support(arch, cuda_version)
        provider = cfg.base.provider
    else:
        provider = "cpu"
    if provider == "nvidia":
        devel = cfg.base.devel_image.replace("{cuda_version}", cuda_version or "")
        runtime = cfg.base.runtime_image.replace("{cuda_version}", cuda_version or "")
    else:
        devel = runtime = cfg.base.os_image
    _check_image_ref("base image", devel)
    _check_image_ref("base image", runtime)
    platform = cfg.build.platform
    if cfg.origins.get("build.platform") == PLATFORM_FOLLOWS:  # a matrix variant may have another arch
        platform = default_platform(arch)
    if "," in platform:
        raise ConfigError(f"build.platform {platform!r} names several platforms: `buildkit build`, `bake` and "
                          "`nightly` build those (one index per tag); this step takes one (--platform linux/amd64)")
    if not PLATFORM_RE.fullmatch(platform):
        raise ConfigError(f"build.platform {platform!r} is not of the form os/arch (linux/amd64)")
    cpu_level = get_level(cfg.build.cpu_level, platform)
    check_platform(arch, platform)
    build_platform = cfg.build.build_platform or machine_platform()
    if not PLATFORM_RE.fullmatch(build_platform):
        raise ConfigError(f"build.build_platform {build_platform!r} is not of the form os/arch (linux/amd64)")
    if cpu_level.native and is_cross(build_platform, platform):
        raise ConfigError(f"build.cpu_level native compiles for this machine's CPU ({build_platform}); an image "
                          f"for {platform} needs another level (all, or one of its platform)")
    jobs = cfg.build.jobs
    if not 0 <= jobs <= MAX_JOBS:
        raise ConfigError(f"build.jobs must be 0 (all cores) to {MAX_JOBS}, got {jobs}")
    for arg in cfg.build.cmake_args:
        if not CMAKE_ARG_RE.fullmatch(arg):
            raise ConfigError(f"build.cmake_args: {arg!r} is not of the form -DNAME=VALUE "
                              "(value without spaces, quotes or shell characters)")
    version = normalise_version(cfg.image.version)  # v1.2.3 is 1.2.3 (metadata-action's type=semver)
    if not VERSION_RE.fullmatch(version):
        raise ConfigError(f"image.version {version!r} is not a valid version")
    image = cfg.image
    for key, text in (("image.title", image.title), ("image.licenses", image.licenses),
                      ("image.description", image.description), ("image.url", image.url)):
        if any(ch in text for ch in "\n\r\0"):
            raise ConfigError(f"{key} must be a single line")
    return BuildRequest(
        arch=arch, cuda_version=cuda_version, provider=provider,
        template="cuda.Dockerfile.j2" if arch.is_cuda else "cpu.Dockerfile.j2",
        devel_image=devel, runtime_image=runtime, target=cfg.build.target, platform=platform,
        build_platform=build_platform, jobs=jobs, no_vmm=cfg.build.no_vmm, ccache=cfg.build.ccache, cpu_level=cpu_level,
        extra_cmake_args=cfg.build.cmake_args,
        image_name=check_repository(cfg.image.name), version=version,
        title=cfg.image.title, licenses=cfg.image.licenses, description=cfg.image.description,
        url=cfg.image.url, base_labels=cfg.image.base_labels,
        variant=variant(arch, cuda_version) + variant_suffix(cpu_level, arch.is_cuda),
        emulate_build_platform=cfg.build.emulate_build_platform, user=check_user(cfg.build.user),
        apt_snapshot=check_apt_snapshot(cfg.base.apt_snapshot),
    )


def cmake_args(request: BuildRequest, source: SourceFacts) -> tuple[str, ...]:
    """The -D flags; the same for real llama.cpp and the bundled example fork."""
    # a cross build: Debian's cross compilers and the target's multiarch folders (platforms.toolchain_file)
    args = [f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN_PATH}"] if request.cross else []
    gcc = gcc_needed(request.cpu_level, request.platform, source.cpu_variants)
    if gcc is not None:
        # the compilers by name (the toolchain file of a cross build names the same): in the flags label
        c, cxx = gcc_commands(request.build_platform, request.platform, gcc)
        args += [f"-DCMAKE_C_COMPILER={c}", f"-DCMAKE_CXX_COMPILER={cxx}"]
        if request.arch.is_cuda and not request.cross:
            # nvcc keeps the base's own g++, the host compiler CUDA's support matrix is checked against
            args.append(f"-DCMAKE_CUDA_HOST_COMPILER={gcc_commands(request.build_platform, request.platform, None)[1]}")
    args += [
        "-DCMAKE_BUILD_TYPE=Release",
        # the CPU backend: every instruction-set flag explicit (cpulevels.py), since ggml's defaults
        # change with SOURCE_DATE_EPOCH
        *cpu_cmake_flags(request.cpu_level, request.platform),
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        # No web UI: the assets are not in every tree, and LLAMA_USE_PREBUILT_UI (default ON in
        # current llama.cpp) downloads them at build time, which makes the image depend on the network.
        "-DLLAMA_BUILD_UI=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF",
        "-DLLAMA_BUILD_WEBUI=OFF",  # the older name of LLAMA_BUILD_UI, still read by older forks
        "-DLLAMA_CURL=OFF",
        "-DLLAMA_OPENSSL=ON",
        f"-DLLAMA_BUILD_COMMIT={source.commit}",
        f"-DLLAMA_BUILD_NUMBER={source.build_number}",
    ]
    extra = list(request.extra_cmake_args)
    for var, _ in compiler_flags(request.cpu_level):
        # a named CPU's -march (cpulevels.compiler_flags): the same variable of build.cmake_args is kept after it
        # instead of replacing it
        args, extra = _joined(args, extra, f"-D{var}=")
    if request.arch.is_cuda:
        args += [
            "-DGGML_CUDA=ON",
            f"-DCMAKE_CUDA_ARCHITECTURES={request.arch.cmake_archs}",
            f"-DGGML_CUDA_NO_VMM={'ON' if request.no_vmm else 'OFF'}",
        ]
        # a cross build: nvcc's front ends told the target's plain char (platforms.cuda_char_flags); a
        # CMAKE_CUDA_FLAGS of build.cmake_args is kept after them instead of replacing them
        char_flags = list(cuda_char_flags(request.build_platform, request.platform))
        if char_flags:
            prefix = "-DCMAKE_CUDA_FLAGS="
            theirs = [a[len(prefix):] for a in extra if a.startswith(prefix)]
            extra = [a for a in extra if not a.startswith(prefix)]
            args.append(prefix + " ".join(char_flags + [t for t in theirs if t]))
        exe_link = []
        if not request.no_vmm:
            # libggml-cuda then needs libcuda.so.1: link against the toolkit's stub, and let the
            # executables link although the real driver library only exists at run time.
            exe_link.append("--allow-shlib-undefined")
        if request.cross:
            # a cross linker does not read /etc/ld.so.conf: it finds the libraries that libggml-cuda
            # needs (libcudart, libcublas) for the executables' link through -rpath-link only
            exe_link.append(f"-rpath-link,{CUDA_LIB_DIR}")
            args.append(f"-DCMAKE_SHARED_LINKER_FLAGS=-Wl,-rpath-link,{CUDA_LIB_DIR}")
        if exe_link:
            args.append(f"-DCMAKE_EXE_LINKER_FLAGS=-Wl,{','.join(exe_link)}")
    return tuple(args) + tuple(extra)


def _joined(args: list[str], extra: list[str], prefix: str) -> tuple[list[str], list[str]]:
    """args' `prefix` flag with the values of extra's same flags after its own, and extra without them."""
    theirs = [a[len(prefix):] for a in extra if a.startswith(prefix)]
    joined = [" ".join([a[len(prefix):], *filter(None, theirs)]) for a in args if a.startswith(prefix)]
    return ([prefix + joined[0] if a.startswith(prefix) else a for a in args],
            [a for a in extra if not a.startswith(prefix)])


def ccache_id(request: BuildRequest) -> str:
    """The compile step's cache mount: one per arch, CUDA version and target platform."""
    return f"llama-buildkit-ccache-{variant(request.arch, request.cuda_version)}-{request.target_cpu.docker}"


def clean_ccache_id(warm: str) -> str:
    """The cache mount of a clean build (buildx --no-cache, reproduce): BuildKit gives such a build an empty
    mount and keeps it in place of the one it was given, so a mount of its own spares the warm one."""
    return f"{warm}-clean"


def with_key_tag(tags: tuple[str, ...], request: BuildRequest, key: str) -> tuple[str, ...]:
    """The local tags and <image>:bk-<key>-<variant>: the sha- tag moves to a later build of the same
    commit with other inputs (other CMake flags), the build-key tag never does, so every build stays
    reachable by a tag of its own (the same tag `build --push` gives it in the registry)."""
    tag = f"{request.image_name}:{build_key_tag(key, request.artifact_variant)}"
    return tags if tag in tags else tags + (tag,)


def make_plan(request: BuildRequest, resolved: Resolved, options: PlanOptions | None = None) -> BuildPlan:
    """The final plan of request, from what was resolved (pure: the same arguments, the same plan)."""
    source, options = resolved.source, options or PlanOptions()
    if not SHA_RE.fullmatch(source.commit):
        raise ConfigError(f"commit {source.commit!r} is not a full 40-hex SHA")
    flags = cmake_args(request, source)
    inputs = request_inputs(request, source, template_sha256=resolved.template_sha256,
                            tool_version=resolved.tool_version, cmake_args=flags, base_images=resolved.base_images,
                            cuda_manifest=resolved.cuda_manifest, cpu_host=resolved.cpu_host)
    key = key_of(inputs)
    tags = build_tags(request.image_name, request.artifact_variant, source.commit, options.extra_tags)
    tags = with_key_tag(tags if options.shared_tags else (), request, key)
    # per arch, CUDA version and target platform, shared by the CPU levels: their objects outside ggml-cpu are
    # the same
    warm = ccache_id(request)
    return BuildPlan(
        request=request, source=source, template_sha256=resolved.template_sha256,
        tool_version=resolved.tool_version, cmake_args=flags,
        gcc_major=gcc_needed(request.cpu_level, request.platform, source.cpu_variants),
        build_targets=TARGET_BINARIES[request.target], labels=tuple(inputs.to_labels(key).items()), tags=tags,
        ccache_id=clean_ccache_id(warm) if options.clean_ccache else warm, ccache_recache=options.clean_ccache,
        inputs=inputs, build_key=key, cuda_manifest=resolved.cuda_manifest, apt_pins=options.apt_pins)


def render_view(plan: BuildPlan, from_refs: tuple[tuple[str, str], ...], *, pinned: bool = True) -> BuildPlan:
    """The plan as the Dockerfile renders it: each base image as its FROM line names it (Resolved.from_refs),
    and without the apt pins unless pinned (the Dockerfile the recorded build rendered, for `reproduce`).
    A view: the plan's labels, lock and build key keep the configured names."""
    names, req = dict(from_refs), plan.request
    request = replace(req, devel_image=names.get(req.devel_image, req.devel_image),
                      runtime_image=names.get(req.runtime_image, req.runtime_image))
    return replace(plan, request=request, apt_pins=plan.apt_pins if pinned else None)
