"""Runtime profiles: validation of [profiles.NAME], the docker run argv and docker-py kwargs (pure),
and `buildkit run --print` / the argument checks of `buildkit bench` through the CLI (no engine needed)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from buildkit.cli.main import main
from buildkit.plan.config import load_config, read_document
from buildkit.core.errors import ConfigError
from buildkit.engine.current import get_engine
from buildkit.flows.serve.serving import run_spec
from buildkit.plan.profiles import get_profile, gpu_device_requests, make_spec, read_profiles, server_command

ROOT = Path(__file__).resolve().parents[2]


def docker_run_argv(spec, *, detach=False):
    """The `docker run` command the engine makes of spec (what `buildkit run --print` shows)."""
    return get_engine().run_command(run_spec(spec, detach=detach))

DFLASH = """schema_version = 1
[build]
arch = "cpu"

[profiles.dflash]
description = "DFlash"
gpus = "all"
needs_draft = true
model = "models/target.gguf"
args = ["--spec-type", "dflash", "--n-gpu-layers", "99", "--ctx-size", "32000",
        "--chat-template-kwargs", '{"enable_thinking": false}']

[profiles.cpu]
args = ["--ctx-size", "4096"]
port = 9000
image = "buildkit-test/llama-server:cpu"
"""


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "target.gguf").write_bytes(b"GGUF")
    (tmp_path / "draft.gguf").write_bytes(b"GGUF")
    (tmp_path / "buildkit.toml").write_text(DFLASH)
    return tmp_path


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "buildkit.toml"
    path.write_text("schema_version = 1\n" + body)
    return path


def test_profiles_parse_and_models_resolve_against_the_config_file(project):
    profiles = read_profiles(read_document(project / "buildkit.toml"))
    assert set(profiles) == {"dflash", "cpu"}
    dflash = profiles["dflash"]
    assert dflash.model == (project / "models" / "target.gguf").resolve()
    assert dflash.needs_draft and dflash.gpus == "all" and dflash.port == 8080
    assert dflash.args[:2] == ("--spec-type", "dflash")
    assert profiles["cpu"].port == 9000 and profiles["cpu"].gpus == ""


def test_the_core_config_still_reads_a_file_with_profiles(project):
    cfg = load_config(project / "buildkit.toml", env={})
    assert cfg["build.arch"] == "cpu"


def test_profiles_come_from_the_document_the_config_parsed(project):
    """buildkit.toml is parsed once: the profiles are read from the resolved config's document."""
    cfg = load_config(project / "buildkit.toml", env={})
    (project / "buildkit.toml").write_text("not = [toml")
    assert set(read_profiles(cfg.document)) == {"dflash", "cpu"}
    assert get_profile(cfg.document, "dflash").model == (project / "models" / "target.gguf").resolve()


def test_the_projects_own_buildkit_toml_has_a_valid_dflash_profile():
    profile = get_profile(read_document(ROOT / "buildkit.toml"), "dflash")
    assert "--spec-type" in profile.args and "dflash" in profile.args and profile.needs_draft
    assert '{"enable_thinking": false}' in profile.args
    load_config(ROOT / "buildkit.toml", env={})  # and the core config is still valid


@pytest.mark.parametrize("body,message", [
    ('[profiles.x]\ngpu = "all"\n', "[profiles.x]: unknown key 'gpu' (did you mean 'gpus'?)"),
    ('[profiles.x]\nflux = 1\n', "unknown key 'flux' (keys: description, args, model"),
    ('[profiles.x]\nargs = "--jinja"\n', "args must be a list of strings, got string '--jinja'"),
    ('[profiles.x]\nargs = ["--parallel", 1]\n', "args must be a list of strings"),
    ('[profiles.x]\nport = "8080"\n', "port must be an integer, got string '8080'"),
    ('[profiles.x]\nport = 70000\n', "port must be between 1 and 65535, got 70000"),
    ('[profiles.x]\nneeds_draft = "yes"\n', "needs_draft must be true or false"),
    ('[profiles.x]\nargs = ["--model", "m.gguf"]\n', "args must not contain --model (use model = ..."),
    ('[profiles.x]\nargs = ["-md", "d.gguf"]\n', "args must not contain -md (use model_draft = ..."),
    ('[profiles.x]\nargs = ["--port=9000"]\n', "args must not contain --port"),
    ('[profiles.x]\nargs = ["--host", "::"]\n', "args must not contain --host (buildkit sets it)"),
    ('profiles = 3\n', "profiles must be tables such as [profiles.dflash], got integer"),
    ('[profiles]\nx = 3\n', "[profiles.x]: must be a table ([profiles.x]), got integer"),
])
def test_profile_errors_are_one_clear_line(tmp_path, body, message):
    with pytest.raises(ConfigError) as err:
        read_profiles(read_document(write(tmp_path, body)))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_unknown_profile_names_the_ones_there(project):
    with pytest.raises(ConfigError, match=r"unknown profile 'dflsh' .*profiles: cpu, dflash\); did you mean 'dflash'"):
        get_profile(read_document(project / "buildkit.toml"), "dflsh")
    with pytest.raises(ConfigError, match="no buildkit.toml found"):
        get_profile(read_document(None), "dflash")


def test_spec_checks_models_and_the_draft_a_profile_needs(project):
    dflash = get_profile(read_document(project / "buildkit.toml"), "dflash")
    with pytest.raises(ConfigError, match="profile 'dflash' needs a draft model: pass --model-draft FILE"):
        make_spec(image="img", model=None, profile=dflash)
    with pytest.raises(ConfigError, match=r"draft model file .*missing.gguf does not exist"):
        make_spec(image="img", model=None, model_draft=project / "missing.gguf", profile=dflash)
    with pytest.raises(ConfigError, match=r"^model file .*nope.gguf does not exist$"):
        make_spec(image="img", model=project / "nope.gguf")
    with pytest.raises(ConfigError, match="no model: pass --model FILE"):
        make_spec(image="img", model=None)
    with pytest.raises(ConfigError, match="no image to run"):
        make_spec(image=None, model=project / "draft.gguf")
    with pytest.raises(ConfigError, match="must not contain --port"):
        make_spec(image="img", model=project / "draft.gguf", extra_args=("--port", "1"))
    with pytest.raises(ConfigError, match="--gpus 'some': expected all, a count"):
        make_spec(image="img", model=project / "draft.gguf", gpus="some")
    spec = make_spec(image="img", model=None, model_draft=project / "draft.gguf", profile=dflash,
                     extra_args=("--threads", "2"))
    assert spec.model == project / "models" / "target.gguf" and spec.gpus == "all" and spec.host_port == 8080
    assert spec.args[-2:] == ("--threads", "2") and spec.profile == "dflash"


def test_docker_run_argv_of_the_dflash_profile(project):
    dflash = get_profile(read_document(project / "buildkit.toml"), "dflash")
    spec = make_spec(image="buun-llama-cpp:cuda13.1-sm120", model=None, model_draft=project / "draft.gguf",
                     profile=dflash)
    argv = docker_run_argv(spec)
    target = str((project / "models" / "target.gguf").resolve())
    draft = str((project / "draft.gguf").resolve())
    assert argv == [
        "docker", "run", "--rm", "--gpus", "all", "--publish", "8080:8080",
        "--volume", f"{target}:/models/target.gguf:ro", "--volume", f"{draft}:/models/draft/draft.gguf:ro",
        "buun-llama-cpp:cuda13.1-sm120",
        "--host", "0.0.0.0", "--port", "8080", "--model", "/models/target.gguf",
        "--model-draft", "/models/draft/draft.gguf",
        "--spec-type", "dflash", "--n-gpu-layers", "99", "--ctx-size", "32000",
        "--chat-template-kwargs", '{"enable_thinking": false}',
    ]
    assert shlex.split(shlex.join(argv)) == argv  # what --print shows runs as it is


def test_argv_without_gpu_detached_on_one_address(project):
    cpu = get_profile(read_document(project / "buildkit.toml"), "cpu")
    spec = make_spec(image=None, model=project / "draft.gguf", profile=cpu, bind="127.0.0.1", name="srv",
                     gpus="none")
    argv = docker_run_argv(spec, detach=True)
    assert "--gpus" not in argv
    assert argv[:8] == ["docker", "run", "--rm", "--detach", "--name", "srv", "--publish", "127.0.0.1:9000:8080"]
    assert argv[argv.index("buildkit-test/llama-server:cpu") + 1:][-2:] == ["--ctx-size", "4096"]


def container_kwargs(spec):
    from buildkit.bench.container import container_spec
    from buildkit.engine.dockerengine import DockerEngine

    return DockerEngine.create_kwargs(container_spec(spec))


def test_container_kwargs_match_the_argv(project):
    dflash = get_profile(read_document(project / "buildkit.toml"), "dflash")
    spec = make_spec(image="img", model=None, model_draft=project / "draft.gguf", profile=dflash, host_port=None,
                     use_profile_port=False, bind="127.0.0.1", labels=(("a", "b"),))
    kw = container_kwargs(spec)
    assert kw["image"] == "img" and kw["detach"] is True and kw["labels"] == {"a": "b"}
    assert kw["command"] == server_command(spec)
    assert kw["ports"] == {"8080/tcp": ("127.0.0.1", None)}  # any free port, only on 127.0.0.1
    assert [(m["Source"], m["Target"], m["Type"], m["ReadOnly"]) for m in kw["mounts"]] == [
        (str(spec.model), "/models/target.gguf", "bind", True),
        (str(spec.model_draft), "/models/draft/draft.gguf", "bind", True)]
    same = make_spec(image="img", model=project / "draft.gguf", model_draft=project / "draft.gguf")
    assert len(container_kwargs(same)["mounts"]) == 2  # one file as model and draft: mounted twice
    (request,) = kw["device_requests"]
    assert request["Count"] == -1 and request["Capabilities"] == [["gpu"]]
    spec_cpu = make_spec(image="img", model=project / "draft.gguf", gpus="")
    assert "device_requests" not in container_kwargs(spec_cpu)


@pytest.mark.parametrize("value,count,ids", [("all", -1, None), ("2", 2, None), ("device=0,1", 0, ["0", "1"])])
def test_gpu_values_become_device_requests(value, count, ids):
    (request,) = gpu_device_requests(value)
    assert request["Count"] == count and request["DeviceIDs"] == ids
    assert gpu_device_requests("") == []


# ------------------------------------------------------------------------------------------------ CLI


def test_cli_run_print(project, monkeypatch):
    monkeypatch.chdir(project)
    result = CliRunner().invoke(main, ["run", "--profile", "dflash", "--image", "buun:sm120",
                                       "--model-draft", "draft.gguf", "--print", "--", "--threads", "4"])
    assert result.exit_code == 0, result.output
    argv = shlex.split(result.output.strip())
    assert argv[:3] == ["docker", "run", "--rm"] and "buun:sm120" in argv and argv[-2:] == ["--threads", "4"]
    assert f"{(project / 'draft.gguf').resolve()}:/models/draft/draft.gguf:ro" in argv


def test_cli_run_print_needs_no_model_file_on_this_host(project, monkeypatch):
    """--print only prints (the command is run where the files are): a model not here is no error."""
    monkeypatch.chdir(project)
    result = CliRunner().invoke(main, ["run", "--image", "buun:sm120", "--model", "/srv/models/elsewhere.gguf",
                                       "--print"])
    assert result.exit_code == 0, result.output
    assert "/srv/models/elsewhere.gguf:/models/elsewhere.gguf:ro" in shlex.split(result.output.strip())


@pytest.mark.parametrize("args,message", [
    (["run", "--profile", "dflash", "--image", "x", "--print"],
     "error: profile 'dflash' needs a draft model: pass --model-draft FILE or set model_draft = in"),
    (["run", "--profile", "nope", "--image", "x", "--print"], "error: unknown profile 'nope'"),
    (["run", "--image", "x", "--model", "missing.gguf"], "error: model file /"),
    (["run", "--image", "x", "--model", "draft.gguf", "--port", "0", "--print"], "error: --port must be between"),
    (["bench"], "error: give either --url (a running server) or --image (buildkit starts it)"),
    (["bench", "--url", "http://127.0.0.1:1", "--image", "x"], "error: give either --url"),
    (["bench", "--url", "http://127.0.0.1:1", "--model", "draft.gguf"],
     "error: --model: only with --image (the server buildkit starts), not with --url"),
    (["bench", "--url", "http://127.0.0.1:1", "--", "-c", "4"],
     "error: llama-server arguments (after --): only with --image"),
    (["bench", "--url", "http://127.0.0.1:1", "--runs", "0"], "error: --runs must be at least 1, got 0"),
    (["bench", "--url", "http://127.0.0.1:1", "--timeout", "0"], "error: --timeout must be more than 0 seconds"),
    (["bench", "--url", "ftp://x"], "error: --url 'ftp://x': expected http://HOST:PORT"),
    (["bench", "--url", "http://127.0.0.1:1", "--compare", "missing.json"], "error: missing.json: no such file"),
    (["bench", "--url", "http://127.0.0.1:1", "--attach-lock"],
     "error: --attach-lock with --url needs --lock-entry KEY"),
    (["bench", "--image", "x", "--profile", "dflash"], "error: profile 'dflash' needs a draft model"),
])
def test_cli_errors_before_anything_starts(project, monkeypatch, args, message):
    monkeypatch.chdir(project)
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert lines[-1].startswith(message), result.output
