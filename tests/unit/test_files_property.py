"""Property tests (issue 22): the files buildkit reads besides buildkit.toml and the lock
(test_parsers_property.py) and every numeric option of the command line, with the extremes of its type.
Whatever they hold, buildkit gives a value or one line (a BuildkitError; at the command line `error: ...`
and a non-zero exit, or click's usage error for what is not a number at all), never a traceback.

Files: the patch queue's series and patches (applied with real `git apply`: all or nothing), a bench
report (`bench --compare`), a prompt file, [profiles.NAME] tables, the lock's nightly record, Docker's
config.json; and a report or summary that cannot be written when the run is over is kept elsewhere."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import example, given, settings
from hypothesis import strategies as st

from buildkit.bench.results import BenchReport, RunResult, load_report
from buildkit.bench.format import compare, format_compare, format_report
from buildkit.bench.protocol import Protocol
from buildkit.cli.main import main
from buildkit.plan.config import ConfigDocument, load_config
from buildkit.plan.buildplan import make_request
from buildkit.engine.api import get_engine
from buildkit.flows.serving import run_spec
from buildkit.plan.profiles import PROFILE_KEYS, get_profile, make_spec
from buildkit.core.errors import PatchError
from buildkit.source.patches import apply_patches, load_patch_queue
from test_parsers_property import SETTINGS, json_values, one_line_or_value

FILES = settings(SETTINGS, max_examples=60)  # a file written per example: fewer than the parsers' 150
FEW = settings(SETTINGS, max_examples=30)  # each example runs git, the whole CLI or an fsync
EXTREME_INTS = [0, -1, 1, 2**31 - 1, 2**31, 2**63 - 1, 2**63, -2**63, 10**30, -10**30]
EXTREME_FLOATS = [float("nan"), float("inf"), float("-inf"), 1e308, -1e308, 5e-324, -0.0, 0.0, 1e-300, 1e6, 1e6 + 1]
json_or_extreme = json_values | st.sampled_from(EXTREME_INTS + EXTREME_FLOATS)


def _tree_hash(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(f"{path.relative_to(root)}\0{path.stat().st_mode:o}\0".encode())
        digest.update(path.read_bytes() if path.is_file() else b"")
    return digest.hexdigest()


# ------------------------------------------------------------------ the patch queue

ENTRIES = ["0001-a.patch", "sub/0002-b.patch", "../outside.patch", "/etc/hostname", "out.patch", "dangling.patch",
           "sub", "", "# note", "./0001-a.patch", "sub/../0001-a.patch", "a\0b.patch", " 0001-a.patch ", "sub/"]


def _queue_folder(root: Path) -> Path:
    queue = root / "queue"
    (queue / "sub").mkdir(parents=True)
    (queue / "0001-a.patch").write_text("a")
    (queue / "sub" / "0002-b.patch").write_text("b")
    (root / "outside.patch").write_text("outside")
    os.symlink(root / "outside.patch", queue / "out.patch")
    os.symlink("gone.patch", queue / "dangling.patch")
    return queue


@FILES
@given(series=st.binary(max_size=200)
       | st.lists(st.sampled_from(ENTRIES) | st.text(max_size=12), max_size=5).map(lambda e: "\n".join(e).encode()))
def test_series_of_any_bytes(tmp_path_factory, series) -> None:
    queue = _queue_folder(tmp_path_factory.mktemp("series"))
    (queue / "series").write_bytes(series)
    got = one_line_or_value(load_patch_queue, queue)
    if got is not None:  # every patch is a file inside the folder
        root = queue.resolve()
        assert all(p.resolve().is_relative_to(root) and p.is_file() for p in got.files)
        assert len(got.names) == len(got.files)


HUNK = "--- a/src/a.c\n+++ b/src/a.c\n@@ -1,2 +1,2 @@\n line 1\n-line 2\n+line two\n"
patch_texts = (st.binary(max_size=300)
               | st.lists(st.sampled_from(HUNK.splitlines(keepends=True) + ["@@ -9,1 +9,1 @@\n", "+x\n",
                                                                            "--- a/../x\n", "+++ /etc/x\n",
                                                                            "diff --git a/src/a.c b/src/a.c\n",
                                                                            "new file mode 100755\n", "\\\n"]),
                          max_size=10).map(lambda lines: "".join(lines).encode())
               | st.just(HUNK.encode()))


@FEW
@given(patches=st.lists(patch_texts, min_size=1, max_size=3))
def test_patches_of_any_bytes_apply_all_or_nothing(tmp_path_factory, patches) -> None:
    root = tmp_path_factory.mktemp("apply")
    tree, queue = root / "tree", root / "queue"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "a.c").write_text("line 1\nline 2\nline 3\n")
    queue.mkdir()
    for i, text in enumerate(patches):
        (queue / f"{i:04d}-p.patch").write_bytes(text)
    loaded = load_patch_queue(queue)  # plain files in the folder: always a queue
    before = _tree_hash(tree)
    try:
        apply_patches(loaded, tree)
    except PatchError as exc:
        assert "\n" not in str(exc) and _tree_hash(tree) == before  # one line, and nothing was written


# ------------------------------------------------------------------ a bench report (--compare)

GOOD_RUN = {"run": 1, "tokens": 800, "wall_s": 10.0, "client_tps": 80.0, "ttft_s": 0.5, "finish_reason": "length",
            "prompt_tokens": 50, "prompt_tps": 500.0, "predicted_tps": 81.0, "draft_n": None, "draft_accepted": None}
GOOD = BenchReport(target={"url": "http://127.0.0.1:8080"}, protocol=Protocol(),
                   runs=[RunResult.from_dict(GOOD_RUN), RunResult.from_dict({**GOOD_RUN, "run": 2})])
GOOD_DOC = GOOD.to_dict()
PLACES = ([("top", k) for k in GOOD_DOC] + [("protocol", k) for k in GOOD_DOC["protocol"]]
          + [("run", k) for k in GOOD_RUN] + [("target", "url"), ("target", "image"), ("top", "unknown")])


def _compare_both_ways(path: Path) -> None:
    other = one_line_or_value(load_report, path)
    if other is not None:
        for base, new in ((other, GOOD), (GOOD, other)):
            compare(base, new)
            format_compare(base, new)
        format_report(other)


@FILES
@given(place=st.sampled_from(PLACES), value=json_or_extreme, drop=st.booleans())
def test_bench_report_with_one_field_changed(tmp_path_factory, place, value, drop) -> None:
    doc = json.loads(json.dumps(GOOD_DOC))
    where, key = place
    table = {"top": doc, "protocol": doc["protocol"], "run": doc["runs"][0], "target": doc["target"]}[where]
    if drop:
        table.pop(key, None)
    else:
        table[key] = value
    path = tmp_path_factory.mktemp("report") / "old.json"
    path.write_text(json.dumps(doc))
    _compare_both_ways(path)


@FILES
@given(raw=st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()))
@example(raw=b"[" * 100_000)  # json.loads: RecursionError
def test_bench_report_of_any_bytes(tmp_path_factory, raw) -> None:
    path = tmp_path_factory.mktemp("report") / "old.json"
    path.write_bytes(raw)
    _compare_both_ways(path)


# ------------------------------------------------------------------ a prompt file

@FILES
@given(raw=st.binary(max_size=200) | st.text(max_size=50).map(str.encode))
@example(raw=b"caf\xe9")  # Latin-1: UnicodeDecodeError
def test_prompt_file_of_any_bytes(tmp_path_factory, raw) -> None:
    path = tmp_path_factory.mktemp("prompt") / "prompt.txt"
    path.write_bytes(raw)
    _cli("bench", "--url", "http://127.0.0.1:9", "--runs", "1", "--prompt-file", str(path))


# ------------------------------------------------------------------ [profiles.NAME] tables

PATHS = ["m.gguf", "missing.gguf", "~/x.gguf", "a\0b", "/", "", ".", "sub"]
profile_values = (st.sampled_from(PATHS) | st.text(max_size=12) | st.booleans() | st.sampled_from(EXTREME_INTS)
                  | st.integers() | st.floats() | st.lists(st.text(max_size=10) | st.integers(), max_size=3)
                  | st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))


@FILES
@given(table=st.dictionaries(st.sampled_from([k.name for k in PROFILE_KEYS]) | st.text(max_size=8), profile_values,
                             max_size=6) | json_values)
@example(table={"model": "a\0b"})  # Path.resolve: ValueError
def test_profile_tables_of_any_shape(tmp_path_factory, table) -> None:
    root = tmp_path_factory.mktemp("profile")
    (root / "m.gguf").write_bytes(b"GGUF")
    (root / "sub").mkdir()
    document = ConfigDocument(root / "buildkit.toml", {"profiles": {"p": table}})
    profile = one_line_or_value(get_profile, document, "p")
    if profile is not None:
        spec = one_line_or_value(make_spec, image=None, model=None, profile=profile)
        if spec is not None:
            get_engine().run_command(run_spec(spec))


# ------------------------------------------------------------------ the lock's nightly record

URL, BRANCH = "https://example.invalid/fork.git", "master"
records = st.fixed_dictionaries({"url": st.just(URL), "branch": st.just(BRANCH)},
                                optional={"variants": json_values | st.dictionaries(
                                    st.sampled_from(["cpu", "cuda13.1-sm120"]),
                                    json_values | st.dictionaries(st.sampled_from(["commit", "patch_set_sha256",
                                                                                   "digest", "version", "date"]),
                                                                  json_values, max_size=5), max_size=2)})


@FEW
@given(record=records | json_values)
def test_nightly_record_of_any_shape(tmp_path_factory, record) -> None:
    """What nightly reads back is the shape it writes, or no record (the registry's labels are asked); what it
    writes next replaces a record of another shape."""
    from buildkit.flows.nightly import read_nightly_record, update_nightly_record

    path = tmp_path_factory.mktemp("lock") / "buildkit.lock"
    path.write_text(json.dumps({"lock_version": 1, "builds": {}, "nightly": record}))
    got = one_line_or_value(read_nightly_record, path, URL, BRANCH)
    if got:  # what nightly then reads of it, as run_nightly and last_built do
        for entry in got.get("variants", {}).values():
            assert all(isinstance(entry.get(k), (str, type(None))) for k in ("commit", "digest", "version"))
    if isinstance(record, dict) or record is None:
        update_nightly_record(path, URL, BRANCH, "cpu", {"commit": "c" * 40, "digest": "sha256:" + "0" * 64})
        assert read_nightly_record(path, URL, BRANCH)["variants"]["cpu"]["commit"] == "c" * 40


# ------------------------------------------------------------------ Docker's client configuration (credentials)

@FILES
@given(raw=st.binary(max_size=200) | st.dictionaries(st.sampled_from(["auths", "credsStore", "credHelpers"]),
                                                      json_values, max_size=3).map(lambda d: json.dumps(d).encode()))
@example(raw=b'{"auths": {}}\xff')  # not UTF-8: UnicodeDecodeError
def test_docker_config_of_any_bytes(tmp_path_factory, raw) -> None:
    from buildkit.oci.credentials import lookup_credentials

    folder = tmp_path_factory.mktemp("docker-config")
    (folder / "config.json").write_bytes(raw)
    one_line_or_value(lookup_credentials, "registry.example:5000", {"DOCKER_CONFIG": str(folder), "PATH": str(folder)})


# ------------------------------------------------------------------ numeric options, extremes included

def _cli(*args: str) -> None:
    """The CLI in this process: exit 0, 1 with one `error:` line, or 2 (click: not a number); no traceback."""
    result = CliRunner().invoke(main, list(args), env={k: None for k in os.environ if k.startswith("LLAMA_BUILDKIT_")})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code in (0, 1, 2) and "Traceback" not in result.output
    if result.exit_code == 1:
        errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) <= 1, result.stderr


def _bench(option: str):
    """Against a port nothing listens on: the value is refused, or the bench starts and fails on run 1."""
    return lambda value: _cli("bench", "--url", "http://127.0.0.1:9", *(["--runs", "1"] if option != "--runs" else []),
                              option, str(value))


def _jobs(value) -> None:
    """--jobs (like --set build.jobs and LLAMA_BUILDKIT_BUILD_JOBS) is build.jobs, checked by make_request."""
    cfg = one_line_or_value(load_config, None, {}, {"build.jobs": (str(value), "--jobs"), "build.arch": ("cpu", "t")})
    if cfg is not None:
        request = one_line_or_value(make_request, cfg)
        assert request is None or 0 <= request.jobs <= 4096


NUMERIC = {
    **{option: _bench(option) for option in ("--runs", "--max-tokens", "--concurrency", "--timeout",
                                              "--startup-timeout", "--degradation-threshold")},
    "--port": lambda value: _cli("run", "--print", "--image", "x/y:1", "--model", __file__, "--port", str(value)),
    # doctor and build check it first (flows/doctor.run_checks); the arch then fails the config check, no engine
    "--min-free-gb": lambda value: _cli("doctor", "--offline", "--arch", "sm_999", "--min-free-gb", str(value)),
    "--jobs": _jobs,
}


@pytest.mark.parametrize("option", sorted(NUMERIC))
def test_numeric_option_at_the_extremes_of_its_type(option) -> None:
    for value in EXTREME_INTS + EXTREME_FLOATS:
        NUMERIC[option](value)


@FEW
@given(option=st.sampled_from(sorted(NUMERIC)), value=st.integers() | st.floats())
def test_numeric_options(option, value) -> None:
    NUMERIC[option](value)


@pytest.mark.parametrize("value", ["inf", "1e308", "nan", "2000000"])
def test_a_timeout_beyond_any_socket_is_one_line(value) -> None:
    """--timeout inf used to reach socket.settimeout and end in an OverflowError traceback."""
    result = CliRunner().invoke(main, ["bench", "--url", "http://127.0.0.1:9", "--timeout", value])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert result.stderr.startswith("error: --timeout must be ") and result.stderr.count("\n") == 1


# ------------------------------------------------------------------ results written at the end of a long run

def test_bench_output_into_a_folder_that_does_not_exist_stops_before_the_runs(tmp_path) -> None:
    result = CliRunner().invoke(main, ["bench", "--url", "http://127.0.0.1:9", "--runs", "1",
                                       "-o", str(tmp_path / "no-such-dir" / "r.json")])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert result.stderr.splitlines() == [f"error: --output {tmp_path / 'no-such-dir' / 'r.json'}: the folder "
                                          f"{tmp_path / 'no-such-dir'} does not exist; create it first (the report "
                                          "is written after the runs)"]


def test_a_report_that_cannot_be_written_is_kept_and_the_line_says_where(tmp_path) -> None:
    """The file cannot be written when the runs are over (here: a symlink into a folder that is gone)."""
    from buildkit.bench.results import save_report
    from buildkit.flows.nightlysummary import Summary, write_summaries

    target = tmp_path / "r.json"
    os.symlink(tmp_path / "gone" / "r.json", target)
    said = save_report(target, GOOD)
    assert said.startswith(f"the report could not be written to {target} (No such file or directory); it is in ")
    kept = Path(said.rsplit(" it is in ", 1)[1])
    assert load_report(kept).runs == GOOD.runs
    kept.unlink()
    summary = Summary(repository="r", url=URL, branch=BRANCH, date="20260101", old_commit=None, new_commit=None)
    (tmp_path / "step").mkdir()
    said = write_summaries(summary, str(target), env={"GITHUB_STEP_SUMMARY": str(tmp_path / "step")})
    assert [line.split(" (")[0] for line in said] == [f"the JSON summary could not be written to {target}",
                                                      f"the step summary could not be written to {tmp_path / 'step'}"]
    for line in said:
        Path(line.rsplit(" it is in ", 1)[1]).unlink()
