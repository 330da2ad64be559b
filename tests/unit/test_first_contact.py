"""Issue 24, first contact: `buildkit init`, the built-in defaults notice, `buildkit tags` (one --commit, v1.2.3,
every tag a publish writes) and render/--print leaving nothing behind. Pure, or the CLI in a subprocess with a
local-path fork (git, no daemon, no engine); one init goes over the git daemon on 127.0.0.1."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from cliutil import run_cli
from forkrepo import make_fork_repo

from buildkit.core.errors import ConfigError
from buildkit.plan.config import KEYS, ConfigDocument, load_config

ROOT = Path(__file__).resolve().parents[2]
C = "905483277823858fdec17ff5c3750451cb1b7cdc"
NOTICE = "built-in defaults in use"


@pytest.fixture(scope="module")
def local_fork(tmp_path_factory) -> dict:
    repo = tmp_path_factory.mktemp("fork") / "tiny-fork"
    upstream, commit = make_fork_repo(repo, ROOT / "examples" / "tiny-fork")
    return {"path": repo, "commit": commit}


def _load(path: Path):
    return load_config(path, env={}, overrides={}, cwd=path.parent)


# --------------------------------------------------------------------------- init

def test_starter_toml_loads_and_names_every_key_with_its_help():
    from buildkit.plan.starter import starter_toml

    text = starter_toml({"source.url": "/x", "source.commit": "a" * 40, "build.arch": "cpu",
                         "matrix.archs": ["cpu"], "image.title": 'odd "title"\t\x7f'})
    cfg = load_config(ConfigDocument(Path("/p/buildkit.toml"), tomllib.loads(text)), env={}, overrides={})
    assert cfg["source.commit"] == "a" * 40 and cfg["build.arch"] == "cpu" and cfg["image.title"] == 'odd "title"\t\x7f'
    assert cfg["build.platform"] == "linux/amd64"
    for key in KEYS:  # every key of the schema is in the file, set or commented out, under its help and variable
        name = key.name.split(".", 1)[1]
        assert re.search(rf"^(# )?{re.escape(name)} = ", text, re.M), key.name
        assert key.env_var in text
    # a commented-out key shows the default that applies: uncommenting all of them changes nothing
    uncommented = re.sub(r"^# (\w+ = )", r"\1", text, flags=re.M)
    again = load_config(ConfigDocument(Path("/p/buildkit.toml"), tomllib.loads(uncommented)), env={}, overrides={})
    assert {k.name: again[k.name] for k in KEYS} == {k.name: cfg[k.name] for k in KEYS}


def test_init_pins_the_forks_head_and_the_file_loads(tmp_path, local_fork):
    proc = run_cli(tmp_path, "init", "--fork", str(local_fork["path"]), "--image", "reg.example/you/llama",
                   "--arch", "cpu")
    assert proc.returncode == 0, proc.stderr
    assert NOTICE not in proc.stderr
    cfg = _load(tmp_path / "buildkit.toml")
    assert cfg["source.commit"] == local_fork["commit"] and re.fullmatch(r"[0-9a-f]{40}", cfg["source.commit"])
    assert cfg["source.url"] == str(local_fork["path"]) and cfg["source.branch"] == "master"
    assert cfg["image.name"] == "reg.example/you/llama" and cfg["build.arch"] == "cpu"
    assert cfg["image.default_variant"] == "cpu" and cfg["matrix.archs"] == ["cpu"]
    assert (tmp_path / "patches").is_dir()
    text = (tmp_path / "buildkit.toml").read_text()
    assert text.count("\n# ") > len(KEYS)  # commented
    lines = proc.stdout.splitlines()
    assert lines[-2:] == ["  buildkit doctor", "  buildkit build --arch cpu"]
    # the next commands read it: no defaults notice, the values from the file
    shown = run_cli(tmp_path, "config", "--json")
    assert json.loads(shown.stdout)["source.commit"] == {"value": local_fork["commit"], "origin": "buildkit.toml"}
    tags = run_cli(tmp_path, "tags", "--release", "1.0.0")
    assert tags.returncode == 0 and tags.stderr == "", tags.stderr
    assert f"reg.example/you/llama:sha-{local_fork['commit'][:7]}-cpu    immutable" in tags.stdout


def test_init_over_the_git_daemon(tmp_path, example_fork):
    proc = run_cli(tmp_path, "init", "--fork", example_fork["url"], "--arch", "sm_89")
    assert proc.returncode == 0, proc.stderr
    cfg = _load(tmp_path / "buildkit.toml")
    assert cfg["source.url"] == example_fork["url"] and cfg["source.commit"] == example_fork["commit"]
    assert cfg["image.default_variant"] == "cuda13.1-sm89"


def test_init_refuses_an_existing_config_unless_forced(tmp_path, local_fork):
    (tmp_path / "buildkit.toml").write_text("mine\n")
    proc = run_cli(tmp_path, "init", "--fork", str(local_fork["path"]))
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "--force" in proc.stderr and "exists" in proc.stderr
    assert (tmp_path / "buildkit.toml").read_text() == "mine\n" and not (tmp_path / "patches").exists()
    forced = run_cli(tmp_path, "init", "--fork", str(local_fork["path"]), "--force")
    assert forced.returncode == 0, forced.stderr
    assert _load(tmp_path / "buildkit.toml")["source.commit"] == local_fork["commit"]


@pytest.mark.parametrize("args,words", [
    (["--fork", "git://127.0.0.1:1/nothing.git"], "cannot ask git://127.0.0.1:1/nothing.git"),
    (["--fork", "/nonexistent/fork"], "cannot ask /nonexistent/fork"),
    (["--fork", "git://127.0.0.1:1/x.git", "--arch", "sm_999"], "sm_999"),  # checked before any network
    (["--fork", "git://127.0.0.1:1/x.git", "--image", "Bad Name"], "Bad Name"),
])
def test_init_failures_are_one_line_and_write_nothing(tmp_path, args, words):
    proc = run_cli(tmp_path, "init", *args, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1 and words in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- the defaults notice

def test_defaults_notice_once_on_stderr_naming_fork_and_image(tmp_path):
    proc = run_cli(tmp_path, "tags", "--release", "1.2.3")
    assert proc.returncode == 0, proc.stderr
    notices = [line for line in proc.stderr.splitlines() if NOTICE in line]
    assert len(notices) == 1 and NOTICE not in proc.stdout
    assert "spiritbuun/buun-llama-cpp" in notices[0] and "docker.io/library/buun-llama-cpp" in notices[0]
    assert "buildkit init" in notices[0]


@pytest.mark.parametrize("args", [["archs"], ["--help"], ["init", "--help"], ["tags", "--help"], ["config"]])
def test_no_defaults_notice_for_archs_help_init_and_config(tmp_path, args):
    proc = run_cli(tmp_path, *args)
    assert proc.returncode == 0, proc.stderr
    assert NOTICE not in proc.stderr


def test_no_defaults_notice_with_a_config(tmp_path):
    other = tmp_path / "elsewhere.toml"
    other.write_text("schema_version = 1\n")
    proc = run_cli(tmp_path, "tags", "--release", "1.2.3", "--config", str(other))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_defaults_notice_is_said_once_per_process(monkeypatch, capsys, tmp_path):
    from buildkit.cli import options

    monkeypatch.setattr(options, "_NOTICED", [])
    monkeypatch.chdir(tmp_path)
    for _ in range(3):
        options.resolve({"config_path": None, "set_items": ()})
    assert capsys.readouterr().err.count(NOTICE) == 1


# --------------------------------------------------------------------------- tags

def _tags(tmp_path, *args):
    """`buildkit tags ARGS` in-process (CliRunner: stdout and stderr apart), with a buildkit.toml."""
    from buildkit.cli.main import main

    (tmp_path / "buildkit.toml").write_text('schema_version = 1\n[image]\nname = "reg.example/t/l"\n'
                                            'default_variant = "cpu"\n[build]\narch = "cpu"\n')
    result = CliRunner().invoke(main, ["tags", "--config", str(tmp_path / "buildkit.toml"), *args],
                                env={k: None for k in __import__("os").environ if k.startswith("LLAMA_BUILDKIT_")})
    return SimpleNamespace(returncode=result.exit_code, stdout=result.stdout, stderr=result.stderr)


def test_tags_accepts_v_as_metadata_action_does(tmp_path):
    plain, with_v = _tags(tmp_path, "--release", "1.2.3"), _tags(tmp_path, "--release", "v1.2.3")
    assert plain.returncode == with_v.returncode == 0, with_v.stderr
    assert plain.stdout == with_v.stdout and "reg.example/t/l:1.2.3-cpu    immutable" in plain.stdout


def test_tags_has_one_commit_option_checked_as_hex(tmp_path):
    ok = _tags(tmp_path, "--release", "1.2.3", "--commit", "ABCDEF1")
    assert ok.returncode == 0 and "reg.example/t/l:sha-abcdef1-cpu    immutable" in ok.stdout, ok.stderr
    for bad in ("xyz", "abc123", "a" * 41, "master"):
        proc = _tags(tmp_path, "--release", "1.2.3", "--commit", bad)
        assert proc.returncode == 1 and proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, bad
        assert "7 to 40 hex" in proc.stderr
    gone = _tags(tmp_path, "--release", "1.2.3", "--commit-sha", "abcdef1")
    assert gone.returncode == 2 and "No such option '--commit-sha'. Did you mean '--commit'?" in gone.stderr
    assert run_cli(tmp_path, "tags", "--release", "1.2.3", "--commit", "xyz").stderr.count("error: ") == 1


def test_tags_lists_every_tag_a_publish_writes(tmp_path):
    proc = _tags(tmp_path, "--release", "1.2.3", "--commit", "ab" * 20, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["immutable"][:2] == ["1.2.3-cpu", "sha-abababa-cpu"] and data["variant"] == "cpu"
    rules = {r["tag"]: r for r in data["rules"]}
    assert rules["bk-<build key, first 24 hex>-cpu"]["kind"] == "immutable"
    assert "build key" in rules["bk-<build key, first 24 hex>-cpu"]["when"]
    assert rules["nightly-cpu"]["kind"] == "moving"
    assert rules["<next patch>-nightly.<YYYYMMDD>[.N]-cpu"]["kind"] == "immutable"
    assert "sha-abababa-cpu" in rules["sha-<commit, first 7 hex>-cpu"]["when"]
    text = _tags(tmp_path, "--release", "1.2.3", "--commit", "ab" * 20).stdout
    for pattern in rules:
        assert f"reg.example/t/l:{pattern}" in text


def test_v_versions_everywhere():
    from buildkit.plan.buildplan import make_request
    from buildkit.plan.tags import normalise_version, parse_version
    from buildkit.plan.tagset import release_tags

    assert str(parse_version("v1.2.3")) == "1.2.3" and normalise_version("V2.0.0-rc.1") == "2.0.0-rc.1"
    assert release_tags("v1.2.3", C, "cpu", default_variant=True) == release_tags("1.2.3", C, "cpu",
                                                                                   default_variant=True)
    for bad in ("v", "vv1.2.3", "v1.2", "version"):
        with pytest.raises(ConfigError):
            parse_version(bad)
    cfg = load_config(None, env={}, overrides={"image.version": ("v1.2.3", "--image-version")})
    assert make_request(cfg).version == "1.2.3"


# --------------------------------------------------------------------------- render and --print

def _fake_prepare(monkeypatch):
    """prepare() without fetching or the engine: a real plan, rendered into out_dir."""
    from buildkit.flows.unit import pipeline
    from buildkit.plan.buildplan import make_plan
    from buildkit.plan.plantypes import Resolved
    from buildkit.plan.request import SourceFacts
    from buildkit.plan.render import write_context

    def prepare(spec, engine, out_dir, **_):
        out_dir.mkdir(parents=True)
        (out_dir / "src").mkdir()
        facts = SourceFacts(url="u", commit=C, commit_time=1, build_number=1, patch_set_sha256="p", patch_names=())
        plan = make_plan(spec.request, Resolved(facts, "t", "1"))
        return SimpleNamespace(plan=plan, rendered=write_context(plan, out_dir), source=SimpleNamespace(commit=C))

    monkeypatch.setattr(pipeline, "prepare", prepare)


@pytest.mark.parametrize("reproducible", ["off", "auto"])
def test_render_out_prints_a_command_that_stays_inside_out(monkeypatch, tmp_path, reproducible):
    from buildkit.cli.main import main
    from buildkit.cli import unitspecs

    _fake_prepare(monkeypatch)
    monkeypatch.setattr(unitspecs, "reproducible_exporter", lambda cfg, engine: reproducible == "auto")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "deep" / "ctx"
    result = CliRunner().invoke(main, ["render", "--arch", "cpu", "--out", "deep/ctx"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    command = result.stdout.split("build it with:\n  ", 1)[1].strip()
    argv = __import__("shlex").split(command)
    assert argv[-1] == str(out)  # the context is DIR itself
    for flag in ("--metadata-file", "--file"):
        assert argv[argv.index(flag) + 1].startswith(str(out) + "/")
    if reproducible == "auto":
        dest = next(a for a in argv if a.startswith("type=oci,"))
        assert f"dest={out}/" in dest
    ignored = (out / ".dockerignore").read_text().split()
    assert "metadata.json" in ignored and "image.oci.tar" in ignored
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep"] and (tmp_path / "deep").iterdir().__next__() == out


def test_print_leaves_no_folder_behind(monkeypatch, tmp_path):
    """--print leaves nothing but what a build leaves: the source's kept build folder with its tree (issue 50
    item 8: a warm --print syncs that tree instead of exporting it afresh), no Dockerfile, no temporary folder."""
    from buildkit.cli.main import main
    from buildkit.cli import unitspecs

    _fake_prepare(monkeypatch)
    monkeypatch.setattr(unitspecs, "reproducible_exporter", lambda cfg, engine: False)
    monkeypatch.chdir(tmp_path)
    cache = tmp_path / "cache"
    result = CliRunner().invoke(main, ["build", "--arch", "cpu", "--print", "--cache-dir", str(cache)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("docker buildx build ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"] and sorted(p.name for p in cache.iterdir()) == [
        "contexts"]
    (kept,) = [p for p in (cache / "contexts").iterdir() if p.is_dir()]
    assert [p.name for p in kept.iterdir()] == ["context"] and [p.name for p in (kept / "context").iterdir()] == ["src"]


def test_init_writes_a_server_profile_that_run_starts(tmp_path, local_fork):
    """The quickstart's last command: `buildkit run --profile server` on the file init wrote."""
    assert run_cli(tmp_path, "init", "--fork", str(local_fork["path"]), "--arch", "sm_120").returncode == 0
    (tmp_path / "target.gguf").write_bytes(b"GGUF")
    proc = run_cli(tmp_path, "run", "--profile", "server", "--image", "reg.example/you/x:cuda13.1-sm120",
                   "--model", "target.gguf", "--print")
    assert proc.returncode == 0, proc.stderr
    argv = __import__("shlex").split(proc.stdout.strip())
    assert argv[argv.index("--gpus") + 1] == "all"
    server_args = "\x00".join(argv[argv.index("reg.example/you/x:cuda13.1-sm120") + 1:])
    assert "\x00".join(["--n-gpu-layers", "99", "--ctx-size", "8192", "--jinja"]) in server_args, argv
    cpu = tmp_path / "cpu"
    cpu.mkdir()
    assert run_cli(cpu, "init", "--fork", str(local_fork["path"]), "--arch", "cpu").returncode == 0
    assert "gpus" not in _load_profiles(cpu / "buildkit.toml")["server"]


def _load_profiles(path):
    import tomllib

    return tomllib.loads(path.read_text())["profiles"]
