"""The typed options of a resolved config (plan/options.py): each setting declared once, as a field of its
section, read as `cfg.build.jobs` with its Python type, made and checked when the config is resolved."""

from __future__ import annotations

import ast
import dataclasses
import textwrap
from pathlib import Path

import pytest

import buildkit
from buildkit.core.errors import ConfigError
from buildkit.plan.config import KEYS, load_config, parse_set_option
from buildkit.plan.matrix import matrix_variants, with_values
from buildkit.plan.options import SECTIONS


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "project" / "buildkit.toml"
    path.parent.mkdir()
    path.write_text(textwrap.dedent(text))
    return path


def test_every_key_is_one_field_of_its_section_and_back():
    fields = [f"{section}.{f.name}" for section, cls in SECTIONS.items() for f in dataclasses.fields(cls)]
    assert fields == [k.name for k in KEYS]


def test_values_from_file_variables_and_flags_come_typed(tmp_path):
    path = write(tmp_path, """\
        schema_version = 1
        [build]
        arch = "cpu"
        cmake_args = ["-DA=1"]
        [source]
        patch_dir = "queue"
        [lock]
        path = "locks/buildkit.lock"
        """)
    cfg = load_config(path, env={"LLAMA_BUILDKIT_BUILD_JOBS": "3", "LLAMA_BUILDKIT_BUILD_CCACHE": "off",
                                 "LLAMA_BUILDKIT_MATRIX_ARCHS": "sm_89, cpu"},
                      overrides=parse_set_option(("build.no_cache=yes",)), cwd=tmp_path)
    assert cfg.build.arch == "cpu" and cfg.build.jobs == 3 and cfg.build.ccache is False and cfg.build.no_cache is True
    assert cfg.build.cmake_args == ("-DA=1",) and cfg.build.cache_from == ()
    assert cfg.matrix.archs == ("sm_89", "cpu")
    project = path.parent.resolve()  # relative to buildkit.toml, not to the working directory
    assert cfg.source.patch_dir == project / "queue" and cfg.lock.path == project / "locks" / "buildkit.lock"
    assert cfg.origins["build.jobs"] == "env LLAMA_BUILDKIT_BUILD_JOBS" and cfg["build.cmake_args"] == ["-DA=1"]


def test_empty_folders_are_none_and_given_ones_expand_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cfg = load_config(None, env={}, cwd=tmp_path)
    assert cfg.cache.dir is None and cfg.base.cuda_root is None
    cfg = load_config(None, env={"LLAMA_BUILDKIT_CACHE_DIR": "~/cache", "LLAMA_BUILDKIT_BASE_CUDA_ROOT": "cuda"},
                      cwd=tmp_path)
    assert cfg.cache.dir == tmp_path / "home" / "cache" and cfg.base.cuda_root == Path("cuda")


def test_options_are_frozen():
    cfg = load_config(None, env={})
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.build.arch = "cpu"  # type: ignore[misc]


def test_a_matrix_variant_has_its_own_typed_options():
    cfg = load_config(None, env={"LLAMA_BUILDKIT_MATRIX_ARCHS": "sm_89,cpu", "LLAMA_BUILDKIT_BUILD_JOBS": "2"})
    variants, _ = matrix_variants(cfg)
    assert [(v.cfg.build.arch, v.cfg.build.jobs) for v in variants] == [("sm_89", 2), ("cpu", 2)]
    assert cfg.build.arch == "sm_120"  # the config the variants came from is unchanged


def test_a_value_of_the_wrong_type_is_refused_where_it_came_from():
    cfg = load_config(None, env={})
    with pytest.raises(ConfigError, match=r"^matrix: build.jobs must be an integer, got string '4'$"):
        with_values(cfg, "matrix", build__jobs="4")
    with pytest.raises(ConfigError, match=r"^matrix: build.target must be one of server, full, light, got 'big'$"):
        with_values(cfg, "matrix", build__target="big")


def test_mypy_knows_the_type_of_each_option(tmp_path):
    api = pytest.importorskip("mypy.api")
    probe = tmp_path / "probe.py"
    probe.write_text("from buildkit.plan.config import load_config\n"
                     "cfg = load_config(None)\n"
                     "reveal_type(cfg.build.jobs)\n"
                     "reveal_type(cfg.lock.path)\n"
                     "reveal_type(cfg.matrix.archs)\n"
                     "cfg.build.jobs + 'x'\n")
    out, _, _ = api.run([str(probe), "--follow-imports=silent", "--no-incremental", "--cache-dir=/dev/null"])
    revealed = [line.split("Revealed type is ", 1)[1] for line in out.splitlines() if "Revealed type is" in line]
    assert [t.replace("builtins.", "") for t in revealed] == ['"int"', '"pathlib.Path"', '"tuple[str, ...]"']
    assert 'Unsupported operand types for + ("int" and "str")' in out


# The stages read settings typed (cfg.build.arch); a string read (cfg["build.arch"], cfg.values[...],
# cfg.path_value(...)) is one mypy cannot check and a renamed key does not break. These are the ones left:
STRING_READS_ALLOWED = {  # (module, line's code): why
    ("cli/config.py", 'shown = {k.name: redact_url(cfg[k.name]) if isinstance(cfg[k.name], str) else cfg[k.name] '
                      'for k in KEYS}'):
        "`buildkit config` shows every key by its dotted name, as resolved (TOML's types: lists, not tuples)",
}


def _string_reads(path: Path) -> list[int]:
    """Lines of path that subscript something named cfg (or its .values), or call .path_value."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        target = node.value if isinstance(node, ast.Subscript) else None
        if isinstance(target, ast.Attribute) and target.attr == "values":
            target = target.value
        named = (isinstance(target, ast.Name) and target.id == "cfg") or \
                (isinstance(target, ast.Attribute) and target.attr == "cfg")
        called = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "path_value"
        if (named or called) and isinstance(node, ast.expr):  # a Subscript or a Call
            lines.append(node.lineno)
    return sorted(set(lines))


def test_settings_are_read_typed_not_by_their_dotted_names():
    package = Path(buildkit.__file__).parent
    found = set()
    for path in sorted(package.rglob("*.py")):
        if path.relative_to(package).as_posix() == "plan/config.py":
            continue  # where the values are resolved and made typed
        text = path.read_text().splitlines()
        found |= {(path.relative_to(package).as_posix(), text[n - 1].strip()) for n in _string_reads(path)}
    assert found == set(STRING_READS_ALLOWED)


def test_the_string_read_finder_finds_each_form(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('a = cfg["build.arch"]\nb = variant.cfg["build.jobs"]\nc = cfg.values["lock.path"]\n'
                     'd = cfg.path_value("lock.path")\ne = cfg.build.arch\nf = other["build.arch"]\n')
    assert _string_reads(probe) == [1, 2, 3, 4]
