"""Tags are computed in one place (issue 49 item 5): every publication's TagSet comes from
plan/tagset.publication_tags(TagTarget, version), the one caller of release_tags, and the is-default rule
(a variant named image.default_variant) is TagTarget.of's alone."""

import ast
from pathlib import Path

import buildkit
from buildkit.plan.config import load_config
from buildkit.plan.tagset import TagTarget, publication_tags, release_tags

PACKAGE = Path(buildkit.__file__).parent
C = "905483277823858fdec17ff5c3750451cb1b7cdc"

# every path that publishes under release or nightly tags: build --push and push, multi-platform builds,
# the nightly (and its assemble, through nightly_tags), promote, and `buildkit tags`' listing
PUBLICATION_PATHS = {"flows/nightly/run.py", "flows/matrix/multiplatform.py", "flows/unit/publishing.py",
                     "release/publish.py", "release/promote.py", "cli/tags.py"}
# a TagSet made by hand is a publication under its build-key tag alone, no release tags
BY_HAND = {
    "flows/nightly/jobs.py": "nightly --job pushes a unit by digest under its build-key tag only",
    "flows/unit/testsimage.py": "the tests image goes under bk-<key>-<variant>-tests only, unsigned",
}


def _calls(tree: ast.AST) -> list[tuple[str, ast.Call]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            out.append((name, node))
    return out


def _functions_calling(name: str) -> set[str]:
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for called, _ in _calls(fn):
                    if called == name:
                        found.add(f"{path.relative_to(PACKAGE)}:{fn.name}")
    return found


def test_release_tags_and_the_rules_are_called_from_the_one_function():
    assert _functions_calling("release_tags") == {"plan/tagset.py:publication_tags"}
    assert _functions_calling("for_build") == {"plan/tagset.py:release_tags"}


def test_every_publication_path_takes_its_tags_from_publication_tags():
    callers = {f.split(":")[0] for f in _functions_calling("publication_tags")}
    assert callers == PUBLICATION_PATHS
    by_hand = {f.split(":")[0] for f in _functions_calling("TagSet")} - {"plan/tags.py", "plan/tagset.py"}
    assert by_hand == set(BY_HAND)


def test_the_is_default_rule_is_written_once():
    readers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "default_variant" \
                    and isinstance(node.value, ast.Attribute) and node.value.attr == "image":
                readers.append(str(path.relative_to(PACKAGE)))
    # cli/ci.py: --bench-variant's default, a variant to bench, not a tag rule
    assert sorted(readers) == ["cli/ci.py", "plan/tagset.py"]


def test_a_target_gives_the_tags_release_tags_gives():
    cfg = load_config(None, env={}, overrides={"image.default_variant": ("cpu", "test")})
    assert TagTarget.of(cfg, "cpu", C).default_variant and not TagTarget.of(cfg, "cpu-arm64", C).default_variant
    target = TagTarget.of(cfg, "cpu", C, build_key="f" * 64, extra=("edge",))
    assert publication_tags(target, "1.2.3") == release_tags("1.2.3", C, "cpu", default_variant=True,
                                                             build_key="f" * 64, extra=("edge",))
    assert publication_tags(TagTarget(C, "cpu"), "1.2.3") == release_tags("1.2.3", C, "cpu", default_variant=False)
