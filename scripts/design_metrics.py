"""The figures issue 49 asks for, read from the package's source (ast, no import): what a maintainer taking buildkit
over has to hold in their head. Run before and after a change to the package's shape, side by side:

    python3 scripts/design_metrics.py [--root DIR] [--json]

- modules and lines per package;
- the result and report types (classes named *Result, *Report, *Outcome, Check, Published);
- get_engine() call sites and the files they are in;
- function-local imports of buildkit modules, per package (cli/'s lazy command modules counted apart);
- the import cycles: strongly connected components of the module-level import graph (TYPE_CHECKING imports left
  out), of the graph with the function-local imports added (the circles those imports hide), and of the
  module-level graph with the TYPE_CHECKING imports added (circles among annotations);
- the configuration's reach: functions with a ResolvedConfig parameter, and the modules they are in; and the cfg
  walk: the modules below cli/ (plan/config.py, which defines it, left out) whose code holds the configuration at
  all (a parameter, variable or attribute named `cfg`, or a ResolvedConfig annotation);
- the raw lock: subscripts of what read_lock returns (`read_lock(...)["builds"]`) and `.get("builds")` calls;
- release_tags call sites.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

RESULT_NAME = re.compile(r"(Result|Report|Outcome)$|^(Check|Published)$")


def module_name(package: Path, path: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imported(node: ast.AST, known: set[str]) -> list[str]:
    """The buildkit modules an import statement loads (a `from pkg import module` names the module)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.startswith("buildkit")]
    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("buildkit"):
        subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known]
        return subs or [node.module]
    return []


class ModuleFacts:
    def __init__(self, name: str, tree: ast.Module, known: set[str]) -> None:
        self.name = name
        self.top: set[str] = set()
        self.local: list[str] = []
        self.typing_only: set[str] = set()
        self._walk_top(tree.body, known)
        self.local = self._local_once(tree, known)

    def _walk_top(self, body: list[ast.stmt], known: set[str]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.If) and _type_checking(stmt):
                for node in ast.walk(stmt):
                    self.typing_only.update(_imported(node, known))
                continue
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if isinstance(stmt, ast.ClassDef):
                    self._walk_top(stmt.body, known)
                continue
            if isinstance(stmt, (ast.If, ast.Try, ast.With)):
                for node in ast.walk(stmt):
                    self.top.update(_imported(node, known))
                continue
            self.top.update(_imported(stmt, known))

    @staticmethod
    def _local_once(tree: ast.Module, known: set[str]) -> list[str]:
        found: list[str] = []
        seen: set[int] = set()
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in seen:
                        seen.add(id(node))
                        if _imported(node, known):
                            found.append(_imported(node, known)[0])
        return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def _package_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(2, len(parts))]


def measure(root: Path) -> dict[str, object]:
    package = root / "buildkit"
    paths = sorted(package.rglob("*.py"))
    known = {module_name(package, p) for p in paths}
    trees = {module_name(package, p): (p, ast.parse(p.read_text())) for p in paths}
    facts = {name: ModuleFacts(name, tree, known) for name, (_, tree) in trees.items()}

    per_package: dict[str, dict[str, int]] = defaultdict(lambda: {"modules": 0, "lines": 0})
    for name, (path, _) in trees.items():
        pkg = name.split(".")[1] if name.count(".") else "buildkit"
        per_package[pkg]["modules"] += 1
        per_package[pkg]["lines"] += len(path.read_text().splitlines())

    results = sorted(f"{name}.{node.name}" for name, (_, tree) in trees.items() for node in ast.walk(tree)
                     if isinstance(node, ast.ClassDef) and RESULT_NAME.search(node.name))

    engine_calls: Counter[str] = Counter()
    release_tags_calls = 0
    raw_lock = 0
    cfg_functions: list[str] = []
    cfg_walk: set[str] = set()
    for name, (_, tree) in trees.items():
        below_cli = not name.startswith("buildkit.cli") and name != "buildkit.plan.config"
        if below_cli and any((isinstance(n, ast.Name) and n.id == "cfg") or (isinstance(n, ast.arg) and n.arg == "cfg")
                             or (isinstance(n, ast.Attribute) and n.attr == "cfg")
                             or (isinstance(n, ast.Name) and n.id == "ResolvedConfig") for n in ast.walk(tree)):
            cfg_walk.add(name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id == "get_engine":
                    engine_calls[name] += 1
                elif node.func.id == "release_tags":
                    release_tags_calls += 1
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call) and \
                    isinstance(node.value.func, ast.Name) and node.value.func.id == "read_lock":
                raw_lock += 1
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and \
                    node.args and isinstance(node.args[0], ast.Constant) and \
                    node.args[0].value in ("builds", "indexes"):
                raw_lock += 1
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                annotations = [a.annotation for a in node.args.args + node.args.kwonlyargs if a.annotation]
                if any("ResolvedConfig" in ast.unparse(a) for a in annotations):
                    cfg_functions.append(f"{name}.{node.name}")

    local: dict[str, int] = Counter()
    for name, f in facts.items():
        pkg = name.split(".")[1] if name.count(".") else "buildkit"
        local[pkg] += len(f.local)

    def graph(with_local: bool, with_typing: bool = False) -> dict[str, set[str]]:
        edges: dict[str, set[str]] = {}
        for name, f in facts.items():
            targets = set(f.top) | (set(f.local) if with_local else set()) | (f.typing_only if with_typing else set())
            # importing a.b.c runs a/__init__ and a/b/__init__ too; those rarely import back, so they are left out
            edges[name] = {t for t in targets if t in known and t != name}
        return edges

    cfg_modules = sorted({fn.rsplit(".", 1)[0] for fn in cfg_functions})
    return {
        "packages": {k: per_package[k] for k in sorted(per_package)},
        "modules": sum(p["modules"] for p in per_package.values()),
        "lines": sum(p["lines"] for p in per_package.values()),
        "result_types": results,
        "check_types": [r for r in results if r.endswith(".Check")],
        "get_engine_calls": sum(engine_calls.values()),
        "get_engine_files": len(engine_calls),
        "function_local_imports": dict(sorted(local.items())),
        "function_local_imports_total": sum(local.values()),
        "function_local_imports_below_cli": sum(v for k, v in local.items() if k != "cli"),
        "cycles_module_level": cycles(graph(False)),
        "cycles_with_local_imports": cycles(graph(True)),
        "cycles_with_type_checking": cycles(graph(False, with_typing=True)),
        "resolvedconfig_functions": len(cfg_functions),
        "resolvedconfig_functions_in_flows": sum(fn.startswith("buildkit.flows.") for fn in cfg_functions),
        "resolvedconfig_modules": cfg_modules,
        "cfg_walk_modules": sorted(cfg_walk),
        "cfg_walk_modules_in_flows": sum(m.startswith("buildkit.flows.") for m in cfg_walk),
        "raw_lock_subscripts": raw_lock,
        "release_tags_calls": release_tags_calls,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = measure(args.root)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    for pkg, n in figures["packages"].items():  # type: ignore[attr-defined]
        print(f"{pkg:8} {n['modules']:3} modules {n['lines']:6} lines")
    print(f"total    {figures['modules']:3} modules {figures['lines']:6} lines")
    for key in ("result_types", "check_types"):
        print(f"{key}: {len(figures[key])}")  # type: ignore[arg-type]
    for key in ("get_engine_calls", "get_engine_files", "function_local_imports_total",
                "function_local_imports_below_cli", "resolvedconfig_functions", "resolvedconfig_functions_in_flows",
                "cfg_walk_modules_in_flows", "raw_lock_subscripts", "release_tags_calls"):
        print(f"{key}: {figures[key]}")
    print(f"function_local_imports: {figures['function_local_imports']}")
    print(f"resolvedconfig_modules: {len(figures['resolvedconfig_modules'])}")  # type: ignore[arg-type]
    print(f"cfg_walk_modules: {len(figures['cfg_walk_modules'])}")  # type: ignore[arg-type]
    for key in ("cycles_module_level", "cycles_with_local_imports", "cycles_with_type_checking"):
        print(f"{key}: {len(figures[key])}")  # type: ignore[arg-type]
        for c in figures[key]:  # type: ignore[attr-defined]
            print("   ", " <-> ".join(m.removeprefix("buildkit.") for m in c))


if __name__ == "__main__":
    main()
