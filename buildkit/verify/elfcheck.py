"""Checks on the image's own files that run nothing of it (readelf-style, pure Python: elfdeps.py).

elf-machine: every ELF file (program or shared library) under /app is 64-bit and of the ELF
machine of build.platform (AArch64 for linux/arm64), and the image's config names that
architecture. A cross build that linked a host object fails here, naming the files.

needed-libraries: every DT_NEEDED of /app's ELF files, and of the libraries they bring, resolves
inside the image by ld.so's search (imagetree.resolve_in_tree): the image's ENV LD_LIBRARY_PATH,
DT_RPATH/DT_RUNPATH, the target machine's system folders; and each program's interpreter (PT_INTERP,
/lib/ld-linux-aarch64.so.1) is in the image. A VMM CUDA build needs the driver's
libcuda.so.1, which the NVIDIA runtime mounts when the container starts: exactly that one is
expected to be absent there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from buildkit.core.errors import ImageSourceError
from buildkit.plan.plantypes import BuildPlan
from buildkit.plan.platforms import ARCHES
from buildkit.verify.elfdeps import ElfError, ElfInfo, machine_system_dirs, read_elf
from buildkit.verify.imagetree import ImageTree, resolve_in_tree
from buildkit.core.check import Check, Status

DRIVER_LIBRARY = "libcuda.so.1"
ELF_MAGIC = b"\x7fELF"
SHOWN = 6  # file names listed in one line at most


def machine_name(machine: int) -> str:
    known = {a.elf_machine: a.elf_name for a in ARCHES.values()}
    return known.get(machine, f"e_machine {machine}")


def is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == ELF_MAGIC
    except OSError:
        return False


@dataclass
class ElfFiles:
    """The ELF files under a folder of the image, by image path."""
    infos: dict[str, ElfInfo] = field(default_factory=dict)
    damaged: dict[str, str] = field(default_factory=dict)  # ELF magic, but unreadable: why

    def __len__(self) -> int:
        return len(self.infos) + len(self.damaged)


def elf_files(tree: ImageTree, image_dir: str = "/app") -> ElfFiles:
    """The regular files (symlinks are other names of them) under image_dir that start with ELF's magic."""
    found = ElfFiles()
    for path in tree.files(image_dir):
        host = tree.host(path)
        if is_elf(host):
            try:
                found.infos[path] = read_elf(host)
            except ElfError as exc:  # a damaged ELF file is a wrong one: shown with its reason
                found.damaged[path] = str(exc).replace(str(host), path)
    return found


def _listed(items: list[str]) -> str:
    more = f" and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return ", ".join(items[:SHOWN]) + more


def _count(n: int) -> str:
    return f"{n} {'library' if n == 1 else 'libraries'}"


def mismatches(files: ElfFiles, machine: int) -> list[str]:
    """'path (what it is)' for each file that is not a 64-bit ELF file of machine."""
    bad = {path: f"{path} (unreadable ELF: {why})" for path, why in files.damaged.items()}
    for path, info in files.infos.items():
        if info.machine != machine or info.elf_class != 2:
            bits = {1: "32-bit", 2: "64-bit"}.get(info.elf_class, "unknown class")
            bad[path] = f"{path} ({machine_name(info.machine)}, {bits})"
    return [bad[p] for p in sorted(bad)]


def check_elf_machine(plan: BuildPlan, tree: ImageTree, files: ElfFiles) -> Check:
    cpu = plan.request.target_cpu
    if not files:
        return Check("elf-machine", Status.FAILED, "no ELF file under /app of the image")
    bad = mismatches(files, cpu.elf_machine)
    if bad:
        return Check("elf-machine", Status.FAILED, f"{len(bad)} of {len(files)} ELF files under /app are not "
                                                   f"{cpu.elf_name} 64-bit ({plan.request.platform}): {_listed(bad)}")
    if tree.architecture != cpu.docker:
        return Check("elf-machine", Status.FAILED,
                     f"the image's config says architecture {tree.architecture or 'nothing'}, "
                     f"not {cpu.docker} ({plan.request.platform})")
    names = [Path(p).name for p in sorted(files.infos)]
    return Check("elf-machine", Status.PASSED,
                 f"{len(files)} ELF files under /app are {cpu.elf_name} 64-bit: {_listed(names)}")


def expected_absent(plan: BuildPlan) -> set[str]:
    """Libraries the image may need without holding them: the driver's, for VMM CUDA builds."""
    return {DRIVER_LIBRARY} if plan.arch.is_cuda and not plan.request.no_vmm else set()


def missing_interpreters(tree: ImageTree, files: ElfFiles, roots: list[str]) -> list[str]:
    """'PATH (the interpreter of PROGRAM)' for each program whose PT_INTERP is no ELF file like it in the image."""
    missing = []
    for path in roots:
        info = files.infos[path]
        if not info.interpreter:
            continue
        try:
            host = tree.host(info.interpreter)
            ok = host.is_file() and read_elf(host).compatible(info)
        except (ElfError, ImageSourceError):
            ok = False
        if not ok:
            missing.append(f"{info.interpreter} (the interpreter of {path})")
    return missing


def check_needed(plan: BuildPlan, tree: ImageTree, files: ElfFiles) -> Check:
    cpu = plan.request.target_cpu
    roots = [p for p, info in sorted(files.infos.items()) if info.machine == cpu.elf_machine and info.elf_class == 2]
    if not roots:
        return Check("needed-libraries", Status.FAILED, f"no {cpu.elf_name} ELF file under /app to resolve")
    dirs = machine_system_dirs(cpu.elf_machine)
    resolution = resolve_in_tree(tree, roots, tree.ld_library_path, dirs)
    absent_ok = expected_absent(plan)
    missing = [f"{r.soname} (needed by {r.needed_by})" for r in resolution.missing if r.soname not in absent_ok]
    missing += missing_interpreters(tree, files, roots)
    if missing:
        where = f"LD_LIBRARY_PATH={':'.join(tree.ld_library_path) or '(unset)'} and {', '.join(dirs)}"
        shown = missing
        return Check("needed-libraries", Status.FAILED, f"{_count(len(missing))} not found in the image ({where}): "
                                                        f"{_listed(shown)}")
    found = len(resolution.libraries) - len(resolution.missing)
    driver = [r.soname for r in resolution.missing if r.soname in absent_ok]
    note = f"; {', '.join(driver)} absent as expected (the NVIDIA driver's, mounted at run time)" if driver else ""
    interpreters = sorted({i for i in (files.infos[p].interpreter for p in roots) if i})
    note += f"; interpreter {', '.join(interpreters)} present" if interpreters else ""
    return Check("needed-libraries", Status.PASSED, f"{_count(found)} needed by {len(roots)} ELF files under /app "
                                                    f"resolve inside the image{note}")


__all__ = ["ElfFiles", "check_elf_machine", "check_needed", "elf_files", "expected_absent", "machine_name",
           "missing_interpreters", "mismatches"]
