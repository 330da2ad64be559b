"""`buildkit run --format olares --out DIR`: the Olares Application Chart of a runtime profile, written into
DIR/NAME/ (plan/olares.py makes it): the image pinned by the engine's digest and read for what it runs as
and where, the GPU envelope from the models' GGUF headers (plan/vram.py), each file replaced whole."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import semver

from buildkit.core.errors import ConfigError
from buildkit.core.ggufheader import read_header
from buildkit.core.platforms import cpu_arch
from buildkit.core.wholefile import write_whole
from buildkit.engine.api import Images
from buildkit.plan.config import KEY_BY_NAME, platform_for
from buildkit.plan.inputs import INPUTS_LABEL, LABEL_PREFIX
from buildkit.plan.k8s import pinned_image
from buildkit.plan.llamaargs import parse_server_args
from buildkit.plan.olares import ManifestVersion, OlaresApp, Resources, app_name, chart_files
from buildkit.plan.profiles import ServerSpec
from buildkit.plan.vram import GiB, Estimate, estimate, host_bytes

OCI_VERSION = "org.opencontainers.image.version"
OCI_SOURCE = "org.opencontainers.image.source"
PROCESS_BYTES = 1 * GiB  # llama-server itself in host memory: tokenizer, CPU buffers, the HTTP server


@dataclass(frozen=True)
class Written:
    folder: Path
    app: OlaresApp
    estimate: Estimate


def _image_facts(labels: dict[str, str]) -> tuple[bool, tuple[str, ...]]:
    """(runs as a user that is not root, Olares' supportArch) from the image's inputs label."""
    try:
        record = json.loads(labels.get(INPUTS_LABEL, "{}"))
    except ValueError:
        record = {}
    record = record if isinstance(record, dict) else {}
    platform = record.get("platform")
    arch = labels.get(LABEL_PREFIX + "arch", "")
    if not isinstance(platform, str) or not platform:
        platform = platform_for(arch) if arch else KEY_BY_NAME["build.platform"].default
    return bool(record.get("user")), (cpu_arch(str(platform)).docker,)


def host_memory(target_host: int, files: int) -> tuple[int, int]:
    """(request, limit) of host memory: what stays on the host plus the process; the limit adds the model
    files, which loading reads through the page cache that the pod's memory is charged for."""
    request = target_host + PROCESS_BYTES
    return request, request + files


def write_app(spec: ServerSpec, out: Path, engine: Images, *, name: str = "", owners: tuple[str, ...] = (),
              manifest_version: ManifestVersion = "0.12.0", gpu_limit: int | None = None,
              models_folder: str = "") -> Written:
    if spec.profile == "" and not spec.args:
        raise ConfigError("--format olares serves a runtime profile: pass --profile NAME (or llama-server arguments)")
    info = engine.image(spec.image)
    image = pinned_image(spec.image, info.repo_digests if info else ())
    labels = info.labels if info else {}
    non_root, archs = _image_facts(labels)
    target = read_header(spec.model)
    draft = read_header(spec.model_draft) if spec.model_draft else None
    settings = parse_server_args(spec.args)
    found = estimate(target, settings, draft)
    files = target.file_size + (draft.file_size if draft else 0)
    request, limit = host_memory(host_bytes(target, settings.gpu_layers), files)
    gpu = found.total
    resources = Resources(memory_request=request, memory_limit=limit, gpu_memory=gpu,
                          gpu_limit=max(gpu_limit or 0, gpu))
    version = labels.get(OCI_VERSION, "")
    chart_version = version if version and semver.Version.is_valid(version) else "0.1.0"
    variant = labels.get(LABEL_PREFIX + "variant", "")
    app = OlaresApp(
        name=app_name(name, spec.image, spec.profile), title=f"{spec.profile or 'llama-server'} llama-server",
        description=f"llama-server, profile {spec.profile or 'none'}, from {image.split('@', 1)[0]}",
        image=image, spec=spec, resources=resources, version=chart_version,
        version_name="-".join(p for p in (version or chart_version, variant) if p),
        source_code=labels.get(OCI_SOURCE, ""), archs=archs, non_root=non_root, owners=owners,
        manifest_version=manifest_version, sizing="\n".join(found.lines(gpu_limit)))
    folder = Path(out) / app.name
    for relative, text in chart_files(app, models_folder or f"huggingface/{app.name}").items():
        path = folder / relative
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_whole(path, text)
        except OSError as exc:
            raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
    return Written(folder, app, found)
