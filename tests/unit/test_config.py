import json
import os
import re
from pathlib import Path

import pytest

from buildkit.plan.config import KEYS, load_config, parse_set_option, read_config_file
from buildkit.core.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "buildkit.toml"
    path.write_text(text)
    return path


def test_defaults_are_the_first_users_setup():
    cfg = load_config(None, env={})
    assert cfg["source.url"] == "https://github.com/spiritbuun/buun-llama-cpp"
    assert cfg["source.branch"] == "master"
    assert cfg["source.commit"] == "905483277823858fdec17ff5c3750451cb1b7cdc"
    assert cfg["build.cuda_version"] == "13.1"
    assert cfg["build.no_vmm"] is True
    assert all(origin.startswith("default") for origin in cfg.origins.values())
    assert cfg.origins["build.platform"] == "default (follows build.arch)"


def test_precedence_file_env_cli(tmp_path):
    path = write(tmp_path, 'schema_version = 1\n[build]\narch = "sm_89"\njobs = 2\ncuda_version = "12.8"\n')
    cfg = load_config(path, env={"LLAMA_BUILDKIT_BUILD_JOBS": "3", "LLAMA_BUILDKIT_BUILD_CUDA_VERSION": "12.9"},
                      overrides={"build.cuda_version": ("13.0", "--cuda")})
    assert cfg["build.arch"] == "sm_89" and cfg.origins["build.arch"] == "buildkit.toml"
    assert cfg["build.jobs"] == 3 and cfg.origins["build.jobs"] == "env LLAMA_BUILDKIT_BUILD_JOBS"
    assert cfg["build.cuda_version"] == "13.0" and cfg.origins["build.cuda_version"] == "--cuda"


def test_every_key_has_an_env_var_with_our_prefix():
    for key in KEYS:
        assert key.env_var.startswith("LLAMA_BUILDKIT_")
        assert not key.env_var.startswith("BUILDKIT_")


def test_env_types_are_parsed():
    cfg = load_config(None, env={"LLAMA_BUILDKIT_BUILD_NO_VMM": "off",
                                 "LLAMA_BUILDKIT_BUILD_CMAKE_ARGS": "-DA=1, -DB=2"})
    assert cfg["build.no_vmm"] is False
    assert cfg["build.cmake_args"] == ["-DA=1", "-DB=2"]


def test_unknown_key_is_named_with_a_suggestion(tmp_path):
    path = write(tmp_path, 'schema_version = 1\n[source]\nurll = "x"\n')
    with pytest.raises(ConfigError, match=r"unknown key 'source.urll' \(did you mean 'source.url'\?\)"):
        read_config_file(path)


def test_unknown_section(tmp_path):
    path = write(tmp_path, 'schema_version = 1\n[sources]\nurl = "x"\n')
    with pytest.raises(ConfigError, match="unknown key 'sources.url'"):
        read_config_file(path)


@pytest.mark.parametrize("body,message", [
    ('[build]\njobs = "four"\n', "build.jobs must be an integer, got string 'four'"),
    ('[build]\nno_vmm = 1\n', "build.no_vmm must be true or false, got integer 1"),
    ('[build]\njobs = true\n', "build.jobs must be an integer, got boolean True"),
    ('[build]\ncmake_args = "-DA=1"\n', "build.cmake_args must be a list of strings"),
    ('[build]\ntarget = "huge"\n', "build.target must be one of server, full, light"),
])
def test_wrong_types(tmp_path, body, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_config_file(write(tmp_path, "schema_version = 1\n" + body))


def test_schema_version_required_and_checked(tmp_path):
    with pytest.raises(ConfigError, match="schema_version is missing"):
        read_config_file(write(tmp_path, '[build]\narch = "cpu"\n'))
    with pytest.raises(ConfigError, match="schema_version 2 is not supported"):
        read_config_file(write(tmp_path, 'schema_version = 2\n'))


def test_invalid_toml(tmp_path):
    with pytest.raises(ConfigError, match="not valid TOML"):
        read_config_file(write(tmp_path, "schema_version = = 1"))


def test_bad_env_value_names_the_variable():
    with pytest.raises(ConfigError, match="LLAMA_BUILDKIT_BUILD_JOBS: build.jobs must be an integer"):
        load_config(None, env={"LLAMA_BUILDKIT_BUILD_JOBS": "many"})


def test_set_option():
    overrides = parse_set_option(("build.jobs=4", "source.url=/x"))
    cfg = load_config(None, env={}, overrides=overrides)
    assert cfg["build.jobs"] == 4 and cfg.origins["build.jobs"] == "--set build.jobs"
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        parse_set_option(("build.jobs",))
    with pytest.raises(ConfigError, match="unknown key 'build.job'"):
        load_config(None, env={}, overrides=parse_set_option(("build.job=4",)))


def test_relative_paths_resolve_against_the_config_file(tmp_path):
    path = write(tmp_path, 'schema_version = 1\n[source]\npatch_dir = "my-patches"\n')
    cfg = load_config(path, env={}, cwd=Path("/"))
    assert cfg.path_value("source.patch_dir") == (tmp_path / "my-patches").resolve()


def test_project_buildkit_toml_is_valid():
    root = Path(__file__).resolve().parents[2]
    cfg = load_config(root / "buildkit.toml", env={})
    assert cfg["source.commit"] == "905483277823858fdec17ff5c3750451cb1b7cdc"


# ---------------------------------------------------------------- LLAMA_BUILDKIT_* variables nothing reads (issue 22)

def test_a_misspelt_variable_is_a_warning_naming_the_one_meant():
    """`LLAMA_BUILDKIT_ARCH=sm_999 buildkit config`: still exit 0 with build.arch from its default, and
    one warning line naming LLAMA_BUILDKIT_BUILD_ARCH (the variable of --arch's key)."""
    from click.testing import CliRunner

    from buildkit.cli.main import main

    env = {k: None for k in os.environ if k.startswith("LLAMA_BUILDKIT_")} | {"LLAMA_BUILDKIT_ARCH": "sm_999"}
    result = CliRunner().invoke(main, ["config", "--json"], env=env)
    assert result.exit_code == 0
    assert json.loads(result.stdout)["build.arch"]["value"] == "sm_120"
    assert result.stderr.splitlines() == ["warning: LLAMA_BUILDKIT_ARCH is not a buildkit variable and is ignored "
                                          "(did you mean LLAMA_BUILDKIT_BUILD_ARCH?)"]


@pytest.mark.parametrize("name,meant", [
    ("LLAMA_BUILDKIT_CUDA", "LLAMA_BUILDKIT_BUILD_CUDA_VERSION"),
    ("LLAMA_BUILDKIT_PATCHES", "LLAMA_BUILDKIT_SOURCE_PATCH_DIR"),
    ("LLAMA_BUILDKIT_JOBS", "LLAMA_BUILDKIT_BUILD_JOBS"), ("LLAMA_BUILDKIT_GIT_TIMOUT", "LLAMA_BUILDKIT_GIT_TIMEOUT"),
    ("LLAMA_BUILDKIT_CACHE", "LLAMA_BUILDKIT_CACHE_DIR"), ("LLAMA_BUILDKIT_XYZZY", None)])
def test_the_variable_meant(name, meant):
    from buildkit.cli.options import FLAG_KEYS
    from buildkit.plan.config import unknown_variables

    warnings = unknown_variables({name: "1", "LLAMA_BUILDKIT_BUILD_ARCH": "sm_89", "PATH": "/bin"}, FLAG_KEYS)
    assert len(warnings) == 1 and warnings[0].startswith(f"{name} is not a buildkit variable")
    assert (f"(did you mean {meant}?)" in warnings[0]) if meant else "did you mean" not in warnings[0]


def test_every_variable_buildkit_reads_is_known():
    """Every LLAMA_BUILDKIT_* name in the code and the scripts is a setting's variable or in OTHER_VARIABLES, so
    a variable buildkit reads never draws the warning."""
    from buildkit.plan.config import unknown_variables

    root = Path(__file__).resolve().parents[2]
    found = {name for folder in ("buildkit", "scripts") for path in (root / folder).rglob("*")
             if path.suffix in (".py", ".sh")
             for name in re.findall(r"LLAMA_BUILDKIT_[A-Z0-9_]*[A-Z0-9]", path.read_text())}
    assert len(found) > 5
    assert unknown_variables(dict.fromkeys(found, "")) == []
