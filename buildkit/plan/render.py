"""Render the Dockerfile for a plan from the Jinja templates in templates/ (StrictUndefined).

Every value that reaches a FROM or RUN line was validated by the plan; values inside RUN
lines are additionally shell-quoted with the `sh` filter.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass
from pathlib import Path

import jinja2

from buildkit.core.errors import RenderError
from buildkit.core.paths import templates_dir
from buildkit.core.wholefile import write_whole
from buildkit.core.paths import templates_sha256 as templates_sha256  # re-exported: its home was here
from buildkit.plan.aptpins import PINS_MOUNT, SCRIPT, AptPins, stage_files
from buildkit.plan.plantypes import BuildPlan
from buildkit.plan.platforms import TOOLCHAIN_PATH, gcc_commands, gcc_packages


@dataclass(frozen=True)
class RenderResult:
    context_dir: Path  # holds Dockerfile and src/
    dockerfile: Path
    dockerfile_sha256: str
    named_contexts: tuple[tuple[str, Path | str], ...] = ()  # --build-context NAME=DIR or NAME=oci-layout://...


def _environment(directory: Path) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(directory)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=False,
        lstrip_blocks=False,
    )
    env.filters["sh"] = lambda value: shlex.quote(str(value))
    return env


def template_context(plan: BuildPlan) -> dict[str, object]:
    req = plan.request
    return {
        "tool_version": plan.tool_version,
        "variant": req.variant,
        "target": req.target,
        "arch": req.arch.name,
        "cmake_archs": req.arch.cmake_archs,
        "cuda_version": req.cuda_version,
        "provider": req.provider,
        "devel_image": req.devel_image,
        "runtime_image": req.runtime_image,
        "no_vmm": req.no_vmm,
        "jobs": req.jobs if req.jobs > 0 else "$(nproc)",
        "cmake_args": plan.cmake_args,
        "build_targets": plan.build_targets,
        "ccache": plan.request.ccache,
        "ccache_id": plan.ccache_id,
        "ccache_recache": plan.ccache_recache,
        "platform": req.platform,
        "build_platform": req.build_platform,
        "cross": req.cross,
        "target_cpu": req.target_cpu,
        "build_cpu": req.build_cpu,
        "ubuntu_mirror": req.target_cpu.ubuntu_mirror,
        "toolchain_path": TOOLCHAIN_PATH,
        "objcopy": f"{req.target_cpu.triplet}-objcopy" if req.cross else "objcopy",
        # GCC of another release than the base's own (plan.gcc_major): its packages and commands
        "gcc_packages": gcc_packages(req.build_platform, req.platform, plan.gcc_major),
        "compilers": gcc_commands(req.build_platform, req.platform, plan.gcc_major),
        **apt_context(plan),
        "user": req.user.split(":")[0] if req.user else "",
        "user_id": req.user.split(":")[1] if req.user else "",
    }


def apt_context(plan: BuildPlan) -> dict[str, object]:
    """_apt.j2's variables: base.apt_snapshot, and the stages whose apt step mounts its apt-pins/ folder
    (`reproduce`; none for a normal build, whose lines then render as ever)."""
    req, pins = plan.request, plan.apt_pins or AptPins()
    return {"apt_snapshot": req.apt_snapshot, "apt_pinned_stages": tuple(sorted(
        {name.split("/")[0] for name in stage_files(pins, _same_base(plan))})), "apt_pins_mount": PINS_MOUNT,
        "apt_pins_script": SCRIPT}


def _same_base(plan: BuildPlan) -> bool:
    req = plan.request
    return not req.cross and req.devel_image == req.runtime_image


def render_dockerfile(plan: BuildPlan, directory: Path | None = None) -> str:
    env = _environment(directory or templates_dir())
    try:
        text = env.get_template(plan.request.template).render(template_context(plan))
    except jinja2.TemplateError as exc:
        raise RenderError(f"template {plan.request.template}: {exc}") from None
    # Collapse the blank lines left by Jinja tags.
    lines: list[str] = []
    blank = False
    for line in text.splitlines():
        if not line.strip():
            if not blank and lines:
                lines.append("")
            blank = True
            continue
        lines.append(line.rstrip())
        blank = False
    return "\n".join(lines).rstrip() + "\n"


def render_toolchain(plan: BuildPlan, directory: Path | None = None) -> str | None:
    """The CMake toolchain file of a cross build (templates/toolchain.cmake.j2); None for a native one."""
    if not plan.request.cross:
        return None
    env = _environment(directory or templates_dir())
    context = dict(template_context(plan), cuda=plan.arch.is_cuda)
    try:
        return env.get_template("toolchain.cmake.j2").render(context).lstrip("\n")
    except jinja2.TemplateError as exc:
        raise RenderError(f"template toolchain.cmake.j2: {exc}") from None


def write_context(plan: BuildPlan, context_dir: Path,
                  named_contexts: tuple[tuple[str, Path | str], ...] = ()) -> RenderResult:
    """Write Dockerfile (and, for a cross build, toolchain.cmake) into context_dir (which already holds
    the patched tree under src/)."""
    text = render_dockerfile(plan)
    toolchain = render_toolchain(plan)
    if toolchain is not None:
        write_whole(context_dir / "toolchain.cmake", toolchain)
    dockerfile = context_dir / "Dockerfile"
    write_whole(dockerfile, text)
    for name, content in stage_files(plan.apt_pins or AptPins(), _same_base(plan)).items():  # (reproduce)
        (context_dir / "apt-pins" / name).parent.mkdir(parents=True, exist_ok=True)
        write_whole(context_dir / "apt-pins" / name, content)
    # what `buildkit render`'s printed command writes into the context folder stays out of the context
    write_whole(context_dir / ".dockerignore", "Dockerfile\n.dockerignore\nmetadata.json\nimage.oci.tar\n")
    return RenderResult(
        context_dir=context_dir,
        dockerfile=dockerfile,
        dockerfile_sha256=hashlib.sha256(text.encode()).hexdigest(),
        named_contexts=named_contexts,
    )
