"""What buildkit imports at run time is what pyproject.toml's `dependencies` install (issue 47, item 1).

Two checks, both against the installed distributions' own metadata (importlib.metadata), not a list kept here:

* every module buildkit/ imports (ast; not under `if TYPE_CHECKING:`, not an optional import whose
  ImportError is caught) belongs to a distribution `dependencies` names itself: one a dependency brings in
  (protobuf through in-toto-attestation, say) can go with that dependency's next release;
* with only the distributions `dependencies` brings in (the closure, extras and markers followed) importable,
  every module of buildkit imports and the SBOM is made and schema-validated. cyclonedx-python-lib's validator
  imports jsonschema only when it runs, and only its `json-validation` extra installs it: without the extra,
  `build --push` with a key crashed at signing (a test-only dependency had brought jsonschema in here).
"""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import json
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "buildkit"


def declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(text) for text in project["dependencies"]]


def _type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _catches_import_error(node: ast.Try) -> bool:
    names = set()
    for handler in node.handlers:
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        names |= {k.id for k in kinds if isinstance(k, ast.Name)}
    return bool(names & {"ImportError", "ModuleNotFoundError"})


def runtime_imports(tree: ast.AST) -> set[str]:
    """The top-level modules a module imports when it runs: not those under `if TYPE_CHECKING:` and not
    optional ones (an import in a `try` whose ImportError is caught)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node):
            for branch in node.orelse:
                visit(branch)
            return
        if isinstance(node, ast.Try) and _catches_import_error(node):
            for part in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(part)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found - set(sys.stdlib_module_names) - {"buildkit"}


def test_the_audit_sees_what_runs_and_not_what_does_not():
    tree = ast.parse("import a.b\nfrom c.d import e\nfrom . import f\nimport os\n"
                     "if TYPE_CHECKING:\n    import g\nelse:\n    import h\n"
                     "try:\n    import i\nexcept ImportError:\n    import j\n"
                     "try:\n    import k\nexcept ValueError:\n    pass\n"
                     "def later():\n    import m\n")
    assert runtime_imports(tree) == {"a", "c", "h", "j", "k", "m"}


def test_every_runtime_import_is_a_declared_dependency():
    names = {canonicalize_name(r.name) for r in declared()}
    owners = metadata.packages_distributions()
    undeclared: dict[str, str] = {}
    unknown: dict[str, str] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for module in runtime_imports(ast.parse(path.read_text())):
            dists = owners.get(module)
            where = str(path.relative_to(ROOT))
            if not dists:
                unknown.setdefault(module, where)
            elif not any(canonicalize_name(d) in names for d in dists):
                undeclared.setdefault(f"{module} ({', '.join(dists)})", where)
    assert unknown == {}, "imported, but no installed distribution provides it"
    assert undeclared == {}, "imported at run time, not in pyproject.toml's dependencies"


def closure(requirements: list[Requirement]) -> set[str]:
    """The distributions pip installs for requirements: each one's own requirements, with the extras asked
    of it and the markers of this interpreter (one not installed here is named, its own not followed)."""
    seen: dict[str, set[str]] = {}
    todo = list(requirements)
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        extras = set(req.extras)
        if name in seen and extras <= seen[name]:
            continue
        seen[name] = seen.get(name, set()) | extras
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            child = Requirement(text)
            if child.marker is None or any(child.marker.evaluate({"extra": extra})
                                           for extra in ({""} | seen[name])):
                todo.append(child)
    return set(seen)


def test_the_closure_follows_extras_and_markers():
    with_extra = closure([Requirement("cyclonedx-python-lib[json-validation]")])
    assert "jsonschema" in with_extra and "lxml" not in with_extra
    assert "jsonschema" not in closure([Requirement("cyclonedx-python-lib")])


# Run with an import hook that refuses every top-level module no distribution of the closure provides.
ONLY_DECLARED = r"""
import importlib.abc, importlib.metadata, json, pkgutil, re, sys
allowed = set(json.loads(sys.argv[1]))
names = {d.metadata["Name"]: re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower()
         for d in importlib.metadata.distributions()}
owners = {top: {names.get(d, d) for d in dists} for top, dists in importlib.metadata.packages_distributions().items()}

class OnlyDeclared(importlib.abc.MetaPathFinder):
    refused = []

    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        dists = owners.get(top)
        if dists and not dists & allowed:
            self.refused.append(top)
            raise ModuleNotFoundError(f"{top} is not installed by buildkit's dependencies", name=name)
        return None

sys.meta_path.insert(0, OnlyDeclared())
import buildkit
for info in pkgutil.walk_packages(buildkit.__path__, "buildkit."):
    if not info.name.endswith("__main__"):
        __import__(info.name)
from buildkit.release.sbom import DebPackage, sbom_document
lock = {"commit": "a" * 40, "source_url": "https://example.com/fork", "patches": ["0001-x.patch"],
        "patch_set_sha256": "b" * 64}
sbom_document([DebPackage("libc6", "2.36-9+deb12u13", "amd64")], lock, image_name="r/x")
print("refused:", sorted(set(OnlyDeclared.refused)))
"""


def test_buildkit_runs_with_only_what_its_dependencies_install():
    allowed = sorted(closure(declared()))
    proc = subprocess.run([sys.executable, "-c", ONLY_DECLARED, json.dumps(allowed)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)  # (3 s here; a busy machine)
    assert proc.returncode == 0, proc.stderr[-3000:]
