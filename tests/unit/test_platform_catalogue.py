"""The platform catalogue (core/platforms.py, with ggml's CPU families in core/ggmlcpu.py) is the one place
a platform is described: no other module keeps a table, list or if-chain of its own keyed by a platform's
names (docs/design.md, "Adding a platform"), and a new entry is all a new platform takes to be planned,
rendered and checked.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys

from cliutil import ROOT, buildkit_env

from buildkit.core.platforms import ARCHES

CATALOGUE = {"buildkit/core/platforms.py", "buildkit/core/ggmlcpu.py"}

# (module, the platform name or fact found there) -> why it may stay there. Empty: every reader asks the
# catalogue. An entry needs a reason that is not "it was there before".
ALLOWED: dict[tuple[str, str], str] = {
    ("buildkit/plan/archs.py", "linux/arm64"): "a fact of the GPU, not of the platform: Jetson Thor (sm_110) and "
                                               "the DGX Spark's GB10 (sm_121) exist only as arm64 systems-on-chip",
}


def _facts() -> tuple[set[str], set[str]]:
    """(names a platform is called by, longer texts only one platform's facts contain)."""
    names, specific = set(), set()
    for p in ARCHES.values():
        names |= {p.docker, p.dpkg, p.processor, p.name, p.github_arch, p.objdump_name, *p.github_runners}
        specific |= {p.triplet, p.elf_name, p.dynamic_linker, p.ubuntu_mirror, *p.legacy_wheel_tags,
                     *filter(None, [p.cuda_target])}
    return names, specific


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _strings(node: ast.AST) -> list[str]:
    """The string constants of a literal or of a collection literal's elements."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _strings(e)]
    return []


def platform_tables(source: str) -> list[tuple[int, str, str]]:
    """(line, the name or fact, what) for every place in a module's source that describes a platform on its
    own: a dict with a platform's name among its keys or values, a comparison with one (or with a collection
    of them), a collection of two or more, a text holding a fact of one platform (its triplet, ld.so, CUDA
    target, mirror, its older manylinux tags), or, anywhere else, a platform's name on its own (a default)."""
    names, specific = _facts()
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found: list[tuple[int, str, str]] = []
    named: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keyed = [s for part in (*node.keys, *node.values) if part is not None for s in _strings(part)
                     if s in names]
            if keyed:
                found.append((node.lineno, keyed[0], "a table keyed by a platform's name"))
        elif isinstance(node, ast.Compare):
            hit = [s for part in (node.left, *node.comparators) for s in _strings(part) if s in names]
            if hit:
                found.append((node.lineno, hit[0], "a comparison with a platform's name"))
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            hit = [s for s in _strings(node) if s in names]
            if len(set(hit)) >= 2:
                found.append((node.lineno, sorted(set(hit))[0], f"a list of platforms {sorted(set(hit))}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            fact = next((f for f in specific if f in node.value), None)
            if fact:
                found.append((node.lineno, fact, "a text holding one platform's fact"))
            elif node.value in names:
                named.append((node.lineno, node.value))
    seen = {(line, literal) for line, literal, _ in found}
    found += [(line, value, "a platform named in code") for line, value in named if (line, value) not in seen]
    return sorted(found)


def test_no_module_outside_the_catalogue_describes_a_platform():
    found = []
    for path in sorted((ROOT / "buildkit").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel in CATALOGUE:
            continue
        for line, literal, what in platform_tables(path.read_text()):
            if (rel, literal) not in ALLOWED:
                found.append(f"{rel}:{line}: {what} ({literal!r})")
    assert not found, "platform facts outside core/platforms.py (add them to the entry):\n" + "\n".join(found)


def test_the_allow_list_names_only_what_is_still_there():
    for (rel, literal), why in ALLOWED.items():
        assert why.strip(), f"{rel}: {literal!r} is allowed without a reason"
        assert literal in {lit for _, lit, _ in platform_tables((ROOT / rel).read_text())}, \
            f"{rel} no longer holds {literal!r}: drop it from ALLOWED"


def test_the_check_finds_the_tables_it_is_for():
    """The shapes the catalogue replaced (issue 23): each is found; reading the catalogue is not."""
    old = """
_ARCHES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}
def hint(arch):
    if arch == "arm64":
        return "install binutils-aarch64-linux-gnu"
    return arch in ("amd64", "arm64")
SYSTEM_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib")
platforms = ("linux/amd64", "linux/arm64")
def image(spec, platform="linux/amd64"): ...
"""
    assert {line for line, _, _ in platform_tables(old)} == {2, 4, 5, 6, 7, 8, 9}
    new = """
from buildkit.core.platforms import ARCHES, cpu_arch
def hint(platform):
    return f"install {cpu_arch(platform).cross_binutils}"
NAMES = {p.docker: p for p in ARCHES.values()}
"""
    assert platform_tables(new) == []


def test_templates_read_the_entry_and_name_no_platform():
    _, specific = _facts()
    for path in sorted((ROOT / "templates").rglob("*.j2")):
        text = path.read_text()
        assert not [f for f in specific if f in text], f"{path.name} names a platform's fact; use target_cpu.*"


# --------------------------------------------------------------------------- a third platform

# Run in a fresh interpreter: the entry is added before any other module reads the catalogue, as an entry
# written into core/platforms.py would be.
THIRD_PLATFORM = r'''
import contextlib, dataclasses, io, json, sys
from buildkit.core import platforms
from buildkit.core.errors import BuildkitError

platforms.ARCHES["riscv64"] = dataclasses.replace(
    platforms.ARM64, docker="riscv64", dpkg="riscv64", triplet="riscv64-linux-gnu", processor="riscv64",
    elf_machine=243, elf_name="RISC-V", objdump_name="riscv", dynamic_linker="ld-linux-riscv64-lp64d.so.1",
    cuda_target=None, legacy_wheel_tags=(), github_runners=(), github_arch="riscv64", cpu=None)

from buildkit.cli.main import main
from buildkit.plan.buildplan import make_plan, make_request
from buildkit.plan.plantypes import Resolved
from buildkit.plan.request import SourceFacts
from buildkit.plan.config import load_config
from buildkit.plan.platforms import parse_platforms
from buildkit.plan.render import render_dockerfile, render_toolchain
from buildkit.source.cudawheels import norm_arch
from buildkit.verify.elfcheck import machine_name
from buildkit.verify.elfdeps import machine_system_dirs
from buildkit.flows.nightly.jobs import label_arch, parse_runners
from buildkit.flows.doctor.platformcheck import judge_emulation

def plan(**values):
    cfg = load_config(None, env={}, overrides={k: (v, "test") for k, v in values.items()})
    facts = SourceFacts(url="u", commit="c" * 40, commit_time=1, build_number=1, patch_set_sha256="p", patch_names=())
    return make_plan(make_request(cfg), Resolved(facts, "t", "1"))

def error(call):
    try:
        call()
    except BuildkitError as e:
        return str(e)
    return None

cross = plan(**{"build.arch": "cpu", "build.platform": "linux/riscv64", "build.build_platform": "linux/amd64",
                "build.cpu_level": "none"})
archs = io.StringIO()
with contextlib.redirect_stdout(archs):
    main(["archs"], standalone_mode=False)
print(json.dumps({
    "dockerfile": render_dockerfile(cross), "toolchain": render_toolchain(cross), "cmake": list(cross.cmake_args),
    "archs": archs.getvalue(),
    "level_all": error(lambda: plan(**{"build.arch": "cpu", "build.platform": "linux/riscv64"})),
    "cuda": error(lambda: plan(**{"build.arch": "sm_120", "build.platform": "linux/riscv64",
                                  "build.cpu_level": "none"})),
    "wheels": error(lambda: norm_arch("riscv64")),
    "platforms": parse_platforms("linux/amd64,linux/riscv64"),
    "ld_so": machine_system_dirs(243), "elf": machine_name(243),
    "runner": [label_arch("self-hosted,riscv64"), parse_runners(["riscv64=rv-box"])],
    "qemu": judge_emulation(["linux/riscv64"], "amd64", ["qemu-riscv64"], []).status,
}))
'''


def test_a_third_platform_is_one_entry():
    """A fake linux/riscv64 entry (no CUDA, no CPU levels, no hosted runner) flows through planning, the cross
    build's Dockerfile and toolchain, `buildkit archs`, the wheels, the image checks and the CI runners."""
    proc = subprocess.run([sys.executable, "-c", THIRD_PLATFORM], env=buildkit_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    dockerfile = got["dockerfile"]
    assert "dpkg --add-architecture riscv64" in dockerfile and "libssl-dev:riscv64" in dockerfile
    assert "gcc-riscv64-linux-gnu g++-riscv64-linux-gnu binutils-riscv64-linux-gnu" in dockerfile
    assert "ports.ubuntu.com" in dockerfile and "FROM --platform=linux/amd64 " in dockerfile
    assert "set(CMAKE_SYSTEM_PROCESSOR riscv64)" in got["toolchain"]
    assert "set(CMAKE_CXX_COMPILER riscv64-linux-gnu-g++)" in got["toolchain"]
    assert not [f for f in got["cmake"] if f.startswith(("-DGGML_SSE42", "-DGGML_CPU_ARM_ARCH"))]  # no CPU family
    rows = {line.split()[0]: line for line in got["archs"].splitlines() if line.strip()}
    assert "riscv64" in rows["cpu"] and "riscv64" not in rows["sm_120"]  # no NVIDIA GPU on it
    assert "linux/amd64 and linux/arm64" in got["level_all"] and "use none" in got["level_all"]
    assert "linux/riscv64" in got["cuda"] and "sm_120" in got["cuda"]
    assert "(x86_64 or aarch64)" in got["wheels"]
    assert got["platforms"] == ["linux/amd64", "linux/riscv64"]
    assert got["ld_so"] == ["/lib/riscv64-linux-gnu", "/usr/lib/riscv64-linux-gnu", "/lib", "/usr/lib"]
    assert got["elf"] == "RISC-V"
    assert got["runner"] == ["riscv64", {"riscv64": "rv-box"}]
    assert got["qemu"] == "passed"  # Status.PASSED (doctor prints it as ok)
