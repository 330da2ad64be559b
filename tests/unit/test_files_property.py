"""Property tests (issue 22): the files buildkit reads besides buildkit.toml and the lock
(test_parsers_property.py) and every numeric option of the command line, with the extremes of its type.
Whatever they hold, buildkit gives a value or one line (a BuildkitError; at the command line `error: ...`
and a non-zero exit, or click's usage error for what is not a number at all), never a traceback.

Files: the patch queue's series and patches (applied with real `git apply`: all or nothing), a bench
report (`bench --compare`), a prompt file, [profiles.NAME] tables, the lock's nightly record, Docker's
config.json; and a report or summary that cannot be written when the run is over is kept elsewhere."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import example, given, settings
from hypothesis import strategies as st

from buildkit.bench.results import BenchReport, RunResult, load_report
from buildkit.bench.format import compare, format_compare, format_report
from buildkit.bench.protocol import Protocol, read_prompt
from buildkit.core.errors import BuildkitError
from buildkit.core.savefile import write_or_keep
from buildkit.plan.config import load_toml
from buildkit.release.lockfile import Lock
from buildkit.source.cpuvariants import VARIANTS_FILE, declared_variants
from buildkit.source.cudasource import long_double_uses
from buildkit.cli.main import main
from buildkit.plan.config import ConfigDocument, load_config
from buildkit.plan.buildplan import make_request
from buildkit.engine.current import get_engine
from buildkit.flows.serve.serving import run_spec
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
    from buildkit.flows.nightly.run import read_nightly_record, update_nightly_record

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
    # doctor and build check it first (flows/doctor/run.run_checks); the arch then fails the config check, no engine
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
    from buildkit.flows.nightly.summary import Summary, write_summaries

    target = tmp_path / "r.json"
    os.symlink(tmp_path / "gone" / "r.json", target)
    said = save_report(target, GOOD)
    assert said.startswith(f"the report could not be written to {target} (No such file or directory); it is in ")
    kept = Path(said.rsplit(" it is in ", 1)[1])
    assert load_report(kept).runs == GOOD.runs
    kept.unlink()
    summary = Summary(repository="r", url=URL, branch=BRANCH, date="20260101", old_commit=None, new_commit=None)
    (tmp_path / "step").mkdir()
    lines = write_summaries(summary, str(target), env={"GITHUB_STEP_SUMMARY": str(tmp_path / "step")})
    assert [line.split(" (")[0] for line in lines] == [f"the JSON summary could not be written to {target}",
                                                       f"the step summary could not be written to {tmp_path / 'step'}"]
    for line in lines:
        Path(line.rsplit(" it is in ", 1)[1]).unlink()


# ------------------------------------------------------------------ the file system (issue 39, classes 3, 4 and 6)
# A FIFO where a file was expected, a device or a host file behind a symlink of the fork's tree, a file over
# its limit, the temporaries of killed writes. (A full disk, a read-only mount and a run killed mid-write:
# tests/engine/test_files_whole.py, on a real tmpfs.)

@contextlib.contextmanager
def _fifo(path: Path):
    """A FIFO at path, and a thread that keeps opening its other end: code that opens it as a file (which
    blocks until the other end is opened) gets an empty read or a reader that goes away, so a test of such
    code fails instead of hanging."""
    os.mkfifo(path)
    stop = threading.Event()

    def answer() -> None:
        while not stop.is_set():
            for flags in (os.O_WRONLY | os.O_NONBLOCK, os.O_RDONLY | os.O_NONBLOCK):
                with contextlib.suppress(OSError):
                    os.close(os.open(path, flags))
            stop.wait(0.02)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        stop.set()
        thread.join()


def _refused(call, *args, said: str = "is a FIFO, not a file"):
    with pytest.raises(BuildkitError) as caught:
        call(*args)
    assert said in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


def _docker_config(path: Path):
    from buildkit.oci.credentials import lookup_credentials
    return lookup_credentials("registry.example:5000", {"DOCKER_CONFIG": str(path.parent), "PATH": ""})


FIFO_READERS = {  # what buildkit reads from a file the user names: each a FIFO there
    "buildkit.toml": ("buildkit.toml", load_toml),
    "the lock": ("buildkit.lock", Lock.read),
    "bench --compare": ("report.json", load_report),
    "bench --prompt-file": ("prompt.txt", read_prompt),
    "Docker's config.json": ("config.json", _docker_config),
    "the fork's ggml/src/CMakeLists.txt": ("ggml/src/CMakeLists.txt", lambda p: declared_variants(p.parents[2])),
}


@pytest.mark.parametrize("reader", sorted(FIFO_READERS))
def test_a_fifo_where_a_file_is_read_is_one_line_without_waiting(tmp_path, reader) -> None:
    name, call = FIFO_READERS[reader]
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    with _fifo(tmp_path / name) as path:
        _refused(call, path)


def test_a_fifo_where_a_file_is_written_is_one_line_and_the_result_is_kept(tmp_path) -> None:
    """bench -o FIFO, --summary FIFO, $GITHUB_OUTPUT a FIFO: refused at once, the text kept elsewhere."""
    for append in (False, True):
        with _fifo(tmp_path / f"out-{append}") as path:
            said = write_or_keep(path, "the text\n", "the report", append=append)
        assert said.startswith(f"the report could not be written to {path} (it is a FIFO, not a file"), said
        kept = Path(said.rsplit(" it is in ", 1)[1])
        assert kept.read_text() == "the text\n"
        kept.unlink()
        assert stat.S_ISFIFO(os.lstat(path).st_mode)  # left as it was


def test_ci_github_out_a_fifo_is_one_line(tmp_path) -> None:
    from buildkit.flows.nightly.ciworkflow import write_workflow

    with _fifo(tmp_path / "nightly.yml") as path:
        _refused(write_workflow, path, "on: push\n", said=f"cannot write the workflow {path}: ")
        _refused(write_workflow, path, "on: push\n", said="is a FIFO, not a file")


_CHILD = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}  # this checkout's buildkit


def _tree_with(tmp_path: Path, relative: str) -> tuple[Path, Path]:
    tree = tmp_path / "tree"
    (tree / relative).parent.mkdir(parents=True)
    return tree, tree / relative


def test_a_tree_file_that_links_to_dev_zero_is_one_line(tmp_path) -> None:
    """ggml/src/CMakeLists.txt -> /dev/zero was a MemoryError traceback after 1.8 GB. Run in a child whose
    address space is capped at 1 GB, so the code before the fix fails quickly there instead of here."""
    tree, path = _tree_with(tmp_path, VARIANTS_FILE)
    os.symlink("/dev/zero", path)
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
            "from buildkit.core.errors import BuildkitError\n"
            "from buildkit.source.cpuvariants import declared_variants\n"
            "try:\n    declared_variants(__import__('pathlib').Path(sys.argv[1]))\n"
            "except BuildkitError as exc:\n    print(exc)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tree)], capture_output=True, text=True, timeout=120,
                          env=_CHILD)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-2000:]
    assert proc.stdout == (f"{VARIANTS_FILE} of the source tree {tree} resolves outside the tree (to /dev/zero); "
                           "buildkit reads only the tree's own files\n")


def test_a_tree_file_that_links_outside_the_tree_is_not_read(tmp_path) -> None:
    tree, path = _tree_with(tmp_path, VARIANTS_FILE)
    (tmp_path / "host-file").write_text("ggml_add_cpu_backend_variant(from_the_host AVX)\n")
    os.symlink(tmp_path / "host-file", path)
    _refused(declared_variants, tree, said=f"{VARIANTS_FILE} of the source tree {tree} resolves outside the tree")


@pytest.mark.parametrize("relative, call", [(VARIANTS_FILE, declared_variants),
                                            ("ggml/src/ggml-cuda/big.cu", long_double_uses)])
def test_a_tree_file_over_its_limit_is_one_line_naming_the_limit(tmp_path, relative, call) -> None:
    from buildkit.core.boundedread import TREE_FILE_LIMIT

    tree, path = _tree_with(tmp_path, relative)
    with open(path, "wb") as fh:
        fh.truncate(TREE_FILE_LIMIT + 1)  # sparse: no disk, no time
    _refused(call, tree, said=f"{relative} of the source tree {tree} is over 16 MiB, the most buildkit reads of it")


def _holder(path: Path) -> subprocess.Popen:
    """A live process that holds path's flock, as a writer does while it writes its temporary."""
    code = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def test_a_temporary_is_swept_only_when_its_writer_is_gone(tmp_path) -> None:
    """A write sweeps the temporaries of killed writes (dead pid, or this pid and not being written) and
    leaves the one a live writer holds."""
    from buildkit.core.wholefile import PREFIX, write_whole

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f"{PREFIX}{int(dead.stdout)}-0123abcd-report.json"
    stale.write_text("half")
    mine = tmp_path / f"{PREFIX}{os.getpid()}-4567abcd-report.json"  # this pid reused (a container's pid 1)
    mine.write_text("half")
    holder = None
    try:
        holder = _holder(tmp_path / "placeholder")
        held = tmp_path / f"{PREFIX}{holder.pid}-89abcdef-report.json"
        os.rename(tmp_path / "placeholder", held)
        write_whole(tmp_path / "report.json", "whole\n")
        assert sorted(p.name for p in tmp_path.iterdir()) == [held.name, "report.json"]
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
    write_whole(tmp_path / "report.json", "whole again\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]
    assert (tmp_path / "report.json").read_text() == "whole again\n"


def test_a_scratch_folder_of_a_run_killed_with_sigkill_is_swept_by_the_next(tmp_path) -> None:
    """A base image's export or verify's root (a whole image) in a folder of the cache: a run killed
    with `kill -9` while it used one left it there for ever."""
    from buildkit.core.wholefile import scratch_dir

    code = ("import sys, time; from buildkit.core.wholefile import scratch_dir\n"
            "with scratch_dir(sys.argv[1], 'export') as d:\n"
            "    (d / 'image.tar').write_bytes(b'x' * 65536); print(d.name, flush=True); time.sleep(600)\n")
    runs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=_CHILD)
            for _ in range(2)]
    names = [run.stdout.readline().strip() for run in runs if run.stdout is not None]
    runs[0].send_signal(signal.SIGKILL)
    runs[0].wait()
    try:
        with scratch_dir(tmp_path, "export") as mine:
            # the killed run's is gone; the live run's (flocked, its pid alive) stays
            assert sorted(p.name for p in tmp_path.iterdir()) == sorted([names[1], mine.name])
    finally:
        runs[1].kill()
        runs[1].wait()
    with scratch_dir(tmp_path, "export"):
        pass
    assert list(tmp_path.iterdir()) == []


def test_a_lock_write_sweeps_the_temporaries_of_earlier_versions(tmp_path) -> None:
    """`.buildkit.lock.XXXXXXXX.tmp`, what a killed lock write left before (100 MB after 11 kills)."""
    from buildkit.release.lockfile import update_lock

    (tmp_path / ".buildkit.lock.k2_x9aqz.tmp").write_text("half")
    (tmp_path / ".other.lock.k2_x9aqz.tmp").write_text("not ours")
    update_lock(tmp_path / "buildkit.lock", lambda lock: lock)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.lock.k2_x9aqz.tmp", "buildkit.lock"]


def test_a_file_is_replaced_with_its_mode_and_through_its_symlink(tmp_path) -> None:
    """As `open(path, "w")` did: a symlink stays a symlink (its target is replaced), the mode stays."""
    from buildkit.core.wholefile import write_whole

    (tmp_path / "real.json").write_text("old")
    os.chmod(tmp_path / "real.json", 0o640)
    os.symlink("real.json", tmp_path / "link.json")
    write_whole(tmp_path / "link.json", "new")
    assert os.path.islink(tmp_path / "link.json") and (tmp_path / "real.json").read_text() == "new"
    assert stat.S_IMODE(os.stat(tmp_path / "real.json").st_mode) == 0o640


# ------------------------------------------------------------------ numeric variables, extremes included

class _NotFound(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the handler's name)
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_GET

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def registry_404():
    """A real HTTP server on loopback that answers 404: a request reaches the socket's time-outs."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _cli_with(env: dict[str, str], *args: str) -> None:
    clean = {k: None for k in os.environ if k.startswith("LLAMA_BUILDKIT_")}
    result = CliRunner().invoke(main, list(args), env={**clean, **env})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code in (0, 1) and "Traceback" not in result.output
    if result.exit_code == 1:
        errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1, result.stderr


REGISTRY_VARIABLES = ("LLAMA_BUILDKIT_REGISTRY_TIMEOUT", "LLAMA_BUILDKIT_REGISTRY_DEADLINE",
                      "LLAMA_BUILDKIT_REGISTRY_TRANSFER_DEADLINE")
EXTREME_TEXTS = [str(v) for v in EXTREME_INTS + EXTREME_FLOATS] + ["1e308", "1e-308", " 7 ", "0x10", "1_000"]


@pytest.mark.parametrize("variables", [REGISTRY_VARIABLES] + [(v,) for v in REGISTRY_VARIABLES])
def test_registry_deadlines_at_the_extremes_of_their_type(registry_404, variables) -> None:
    """All three at 1e308 were an OverflowError traceback (the socket's time-out) against a real server."""
    for text in EXTREME_TEXTS:
        _cli_with(dict.fromkeys(variables, text), "diff", f"{registry_404}/a/b:1", f"{registry_404}/a/c:1")


def test_the_git_deadline_at_the_extremes_of_its_type(tmp_path, monkeypatch) -> None:
    """LLAMA_BUILDKIT_GIT_TIMEOUT, read by every git command (here `init`'s ls-remote of a missing fork)."""
    monkeypatch.chdir(tmp_path)
    for text in EXTREME_TEXTS:
        _cli_with({"LLAMA_BUILDKIT_GIT_TIMEOUT": text}, "init", "--fork", str(tmp_path / "no-fork"))
        assert not (tmp_path / "buildkit.toml").exists()


def test_build_jobs_variable_at_the_extremes_of_its_type() -> None:
    for text in EXTREME_TEXTS:
        env = {"LLAMA_BUILDKIT_BUILD_JOBS": text, "LLAMA_BUILDKIT_BUILD_ARCH": "cpu"}
        cfg = one_line_or_value(load_config, None, env)
        if cfg is not None:
            request = one_line_or_value(make_request, cfg)
            assert request is None or 0 <= request.jobs <= 4096
