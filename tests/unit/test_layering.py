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
