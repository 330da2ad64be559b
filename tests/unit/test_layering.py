"""The package's imports point down the data path only (issue 14): a stage imports its own package
and the ones below it, never one above."""

import ast
from pathlib import Path

import buildkit

# lowest first: shared primitives, image content, then the stages in data-path order, then the front ends
ORDER = ["core", "oci", "source", "plan", "engine", "verify", "release", "flows", "bench", "gpu", "cli"]
PACKAGE = Path(buildkit.__file__).parent


def imports_of(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("buildkit."):
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("buildkit.")]
    return found


def test_every_module_is_in_a_stage_package():
    loose = [p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"]
    assert loose == []
    assert sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()) == sorted(ORDER)


def test_imports_point_down_the_data_path():
    rank = {name: i for i, name in enumerate(ORDER)}
    against = []
    for path in sorted(PACKAGE.rglob("*.py")):
        here = path.relative_to(PACKAGE).parts[0]
        for module in imports_of(path):
            there = module.split(".")[1]
            if there in rank and rank[there] > rank[here]:
                against.append(f"{path.relative_to(PACKAGE)} imports {module}")
    assert against == []


def test_no_module_over_400_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}


# The docker CLI is spoken only inside buildkit/engine/ (issue 23): the stages above hand it specs
# (engine/specs.py). A list or tuple literal outside engine/ that starts with "docker", or holds
# "buildx" or a flag of `docker buildx build` / `docker run`, is a docker command line in the making.
DOCKER_WORDS = {"buildx", "--rm", "--gpus", "--volume", "--publish", "--detach", "--build-context", "--build-arg",
                "--metadata-file", "--load", "--push", "--cache-from", "--cache-to", "--output", "--tag",
                "--platform", "--no-cache", "--builder", "--progress", "--target", "--label", "--file"}
ALLOWED_WORDS = {  # (module, word): why it is not docker's argv
    ("cli/bench.py", "--gpus"): "buildkit bench's own option names, in its error message",
    ("cli/run.py", "docker"): "the choices of buildkit run --format (docker or k8s)",
    ("core/livedisplay.py", "buildx"): "the name of a row of the live display",
}


def docker_words(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, (ast.List, ast.Tuple)) or not node.elts:
            continue
        words = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        first = node.elts[0]
        if isinstance(first, ast.Constant) and first.value == "docker":
            found.add("docker")
        found |= {w for w in words if w in DOCKER_WORDS or w.startswith("--provenance")}
    return found


def test_no_docker_argv_outside_the_engine():
    found = {(str(p.relative_to(PACKAGE)), word) for p in sorted(PACKAGE.rglob("*.py"))
             if p.relative_to(PACKAGE).parts[0] != "engine" for word in docker_words(p)}
    assert sorted(found - set(ALLOWED_WORDS)) == []
    assert sorted(set(ALLOWED_WORDS) - found) == []  # an allowance nothing needs any more goes


def test_no_module_imports_another_modules_private_names():
    """A name with a leading underscore belongs to its module: one another module needs is public."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        own = "buildkit." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("buildkit.") \
                    and node.module != own:
                found += [f"{path.relative_to(PACKAGE)} imports {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert found == []


# The engine is made once per command, in cli/, and passed down as the role(s) a function uses (issue 49
# item 4: engine/api.py's Host, Builder, Images, Containers). Below cli/, nothing calls get_engine().


def calls_get_engine(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            if (func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)) == "get_engine":
                return True
    return False


def test_the_engine_is_made_in_the_cli_and_passed_down():
    calling = {str(p.relative_to(PACKAGE)) for p in sorted(PACKAGE.rglob("*.py"))
               if p.parts[len(PACKAGE.parts)] != "cli" and calls_get_engine(p)}
    assert calling == set()


# An import of a buildkit module inside a function hides an import circle rather than removing it (issue 49):
# outside cli/ (whose command modules are imported when their command runs: cli/main.py) every buildkit import
# is at module level, and the module-level imports make no circle. These are the exceptions.
LOCAL_IMPORTS: dict[tuple[str, str], str] = {}  # (module, the buildkit module it imports in a function): why
# Circles through `if TYPE_CHECKING:` imports (annotations only; no circle at run time): none are left (issue 49:
# engine/specs.py holds ContainerSpec and Mount; plan/request.py and plan/plantypes.py the plan's types). A new one
# goes here with the move that ends it, or better, that move is made.
TYPE_CIRCLES: dict[tuple[str, ...], str] = {}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imported_modules(node: ast.Import | ast.ImportFrom) -> set[str]:
    """The buildkit modules an import statement loads: `from buildkit.x import y` is buildkit.x.y when y is a
    module, else buildkit.x."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name.split(".")[0] == "buildkit"}
    if node.level or not node.module or node.module.split(".")[0] != "buildkit":
        return set()
    return {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module for a in node.names}


def imports_by_place(path: Path) -> tuple[set[str], set[str], set[str]]:
    """(module level, under `if TYPE_CHECKING:`, inside a function): the buildkit modules path imports."""
    top: set[str] = set()
    typing: set[str] = set()
    local: set[str] = set()

    def walk(node: ast.AST, where: set[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                where |= imported_modules(child)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                walk(child, local)
            elif where is top and isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                walk(child, typing)
            else:
                walk(child, where)

    walk(ast.parse(path.read_text()), top)
    return top, typing, local


def test_no_function_local_import_of_buildkit_outside_cli():
    found = {(str(p.relative_to(PACKAGE)), m) for p in sorted(PACKAGE.rglob("*.py"))
             if p.relative_to(PACKAGE).parts[0] != "cli" for m in imports_by_place(p)[2]}
    assert sorted(found - set(LOCAL_IMPORTS)) == []
    assert sorted(set(LOCAL_IMPORTS) - found) == []  # an allowance nothing needs any more goes


def circles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[tuple[str, ...]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(tuple(sorted(component)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def import_graph(*, typing: bool) -> dict[str, set[str]]:
    graph = {}
    for name, path in MODULES.items():
        top, under_typing, _ = imports_by_place(path)
        graph[name] = (top | under_typing if typing else top) - {name}
    return graph


def test_module_level_imports_make_no_circle():
    assert circles(import_graph(typing=False)) == []


def test_circles_through_type_checking_imports_are_the_known_ones():
    assert circles(import_graph(typing=True)) == sorted(tuple(sorted(circle)) for circle in TYPE_CIRCLES)


# flows/ in subpackages that show the stages (issue 49 item 3): one build unit; many units (the matrix, an index);
# the nightly; then what builds on them. A subpackage imports its own modules and those of the ones before it.
FLOWS_ORDER = ["unit", "matrix", "nightly", "reproduce", "doctor", "setup", "serve"]


def test_flows_subpackages_point_down():
    rank = {name: i for i, name in enumerate(FLOWS_ORDER)}
    flows = PACKAGE / "flows"
    assert sorted(p.name for p in flows.iterdir() if (p / "__init__.py").is_file()) == sorted(FLOWS_ORDER)
    assert [p.name for p in flows.glob("*.py")] == ["__init__.py"]  # every flow in the subpackage of its stage
    against = []
    for path in sorted(flows.rglob("*.py")):
        parts = path.relative_to(flows).parts
        if len(parts) < 2:
            continue
        for module in imports_of(path):
            there = module.split(".")[2] if module.startswith("buildkit.flows.") else None
            if there in rank and rank[there] > rank[parts[0]]:
                against.append(f"{path.relative_to(PACKAGE)} imports {module}")
    assert against == []


# What holds the configuration itself (plan/config's ResolvedConfig, plan/matrix's Variant.cfg) or makes it
# (load_config, matrix_variants, with_values): the CLI resolves it into frozen specs (cli/unitspecs, matrixspecs,
# nightlyspecs, reproducespecs) and hands those down.
CONFIG_NAMES = {"ResolvedConfig", "load_config", "matrix_variants", "with_values"}


def config_reads(path: Path, root: Path = PACKAGE) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.alias):
            name = node.name.rsplit(".", 1)[-1]
        elif isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, ast.Attribute):
            name = "cfg" if node.attr == "cfg" else node.attr
        elif isinstance(node, ast.arg):
            name = node.arg
        else:
            continue
        if name in CONFIG_NAMES or name == "cfg":
            found.append(f"{path.relative_to(root)}:{getattr(node, 'lineno', '?')} {name}")
    return found


def test_flows_and_release_are_handed_specs_never_the_config():
    """Config resolved at the CLI (issue 49 item 2, cibuildwheel's resolve-once): nothing in flows/ or release/
    names the configuration, makes it, or reads a `cfg`; they read the frozen specs the CLI made."""
    found = [hit for p in sorted(PACKAGE.rglob("*.py")) if p.relative_to(PACKAGE).parts[0] in ("flows", "release")
             for hit in config_reads(p)]
    assert found == []


def test_the_config_check_sees_a_config_read(tmp_path):
    """config_reads finds each way a module can hold the configuration (the rule above cannot pass by missing it)."""
    module = tmp_path / "m.py"
    module.write_text("from buildkit.plan.config import ResolvedConfig, load_config\n"
                      "def f(cfg):\n    return cfg.build, v.cfg, matrix_variants(x), with_values(y)\n")
    names = [hit.split()[-1] for hit in config_reads(module, tmp_path)]
    assert sorted(set(names)) == ["ResolvedConfig", "cfg", "load_config", "matrix_variants", "with_values"]

