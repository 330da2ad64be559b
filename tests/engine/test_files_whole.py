"""Files replaced whole, on real file systems (issue 39, classes 4 and 6): a small tmpfs filled to the
last byte, a read-only mount, and a real `buildkit` process ended by the kernel in the middle of its
write. Whatever happens, the file buildkit was asked to write is either as it was or as it is meant to
be, never half; the run says so in one line and exits non-zero; and the temporary a killed run leaves
is removed by the next run. Cheap: no build, no engine, a loopback bench server, a tiny local fork."""

from __future__ import annotations

import contextlib
import json
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cliutil import buildkit_env, run_cli
from hostile import HostileServer
from test_bench_figures import FIVE, stream

SANE = stream(FIVE, {"completion_tokens": 5, "prompt_tokens": 9}, {"predicted_per_second": 50.0})
OLD = b'{"the earlier report": "kept"}\n'
PREFIX = ".buildkit-tmp-"  # core/wholefile.py's temporaries (spelled here: the test runs on the code before, too)
BIG_PROMPT = "a long prompt " * 1500  # 21 KB: the report (which holds the prompt) is over 4 KB


@contextlib.contextmanager
def tmpfs(folder: Path, size: str = "64k") -> Iterator[Path]:
    """A real tmpfs of `size` mounted on folder (the tests run as root), unmounted however the test ends."""
    folder.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs (the tests run as root): {proc.stderr}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path) -> None:
    """Write a filler file until the file system says it is full."""
    with open(folder / "filler", "wb", buffering=0) as fh:
        with contextlib.suppress(OSError):
            while True:
                fh.write(b"\0" * 4096)
    assert (folder / "filler").stat().st_size > 0


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(PREFIX))


def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def bench(cwd: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    (cwd / "prompt.txt").write_text(BIG_PROMPT)
    return run_cli(cwd, "bench", "--url", url, "--runs", "1", "--max-tokens", "5", "--timeout", "20",
                   "--prompt-file", str(cwd / "prompt.txt"), *args, env=buildkit_env(), timeout=120)


def one_error_line(proc: subprocess.CompletedProcess, said: str) -> str:
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and said in errors[0], proc.stderr
    return errors[0]


def forget_kept(line: str) -> None:
    """The report kept in the temporary folder (the line says where): not left behind by the test."""
    if " it is in " in line:
        Path(line.rsplit(" it is in ", 1)[1].split(";")[0].strip()).unlink(missing_ok=True)


def test_a_full_disk_leaves_the_earlier_report_whole(tmp_path: Path) -> None:
    """bench -o over an earlier report on a full tmpfs: `open(path, "w")` emptied it and wrote 4,096
    bytes of the new one; now the earlier report is as it was, and the new one is kept elsewhere."""
    with tmpfs(tmp_path / "disk") as disk, HostileServer("answer", answer=SANE) as server:
        (disk / "report.json").write_bytes(OLD)
        fill(disk)
        proc = bench(tmp_path, server.url, "--output", str(disk / "report.json"))
        line = one_error_line(proc, f"the report could not be written to {disk / 'report.json'} "
                                    "(No space left on device); it is in ")
        forget_kept(line)
        assert (disk / "report.json").read_bytes() == OLD
        assert temporaries(disk) == []


def test_a_read_only_folder_is_one_line_and_leaves_what_is_there(tmp_path: Path) -> None:
    """render --out into a read-only mount ended in an OSError traceback (mkdir of the tree's folder)."""
    source, head = fork(tmp_path)
    with tmpfs(tmp_path / "disk") as disk, HostileServer("answer", answer=SANE) as server:
        (disk / "report.json").write_bytes(OLD)
        (disk / "out").mkdir()
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        proc = bench(tmp_path, server.url, "--output", str(disk / "report.json"))
        forget_kept(one_error_line(proc, f"could not be written to {disk / 'report.json'} (Read-only file system)"))
        assert (disk / "report.json").read_bytes() == OLD
        proc = render(tmp_path, source, head, disk / "out", tmp_path / "cache")
        if "base image" in proc.stderr:
            pytest.skip(f"the test base image is not in the engine: {proc.stderr}")
        one_error_line(proc, f"into {disk / 'out' / 'src'}: Read-only file system")


KILLED = ("import signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_DFL); sys.argv[0] = 'buildkit'; "
          "from buildkit.cli.main import main; main()")


def killed_mid_write(cwd: Path, limit: int, *args: str) -> subprocess.CompletedProcess:
    """The real CLI, ended by the kernel in the middle of writing a file: with a file size limit and
    SIGXFSZ at its default action (Python ignores it), the write that crosses the limit kills the process
    at once, as `kill -9` would: no handler, no cleanup, exactly mid-write, every time."""
    def limit_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([sys.executable, "-c", KILLED, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, preexec_fn=limit_files,
                          env={**buildkit_env(), "PYTHONDONTWRITEBYTECODE": "1"})


def test_a_run_killed_mid_write_leaves_the_earlier_report_and_the_next_run_sweeps_its_temporary(
        tmp_path: Path) -> None:
    (tmp_path / "prompt.txt").write_text(BIG_PROMPT)
    report = tmp_path / "out" / "report.json"
    report.parent.mkdir()
    report.write_bytes(OLD)
    with HostileServer("answer", answer=SANE) as server:
        args = ["bench", "--url", server.url, "--runs", "1", "--max-tokens", "5", "--prompt-file",
                str(tmp_path / "prompt.txt"), "--output", str(report)]
        for _ in range(3):  # killed runs pile up temporaries, as the lock's did (100 MB after 11 kills)
            proc = killed_mid_write(tmp_path, 8192, *args)
            assert proc.returncode == -signal.SIGXFSZ, proc.stdout + proc.stderr
            assert report.read_bytes() == OLD  # `open(path, "w")` had left 8,192 bytes of the new one
        assert len(temporaries(report.parent)) == 1  # each run swept the one before it
        proc = run_cli(tmp_path, *args, env=buildkit_env(), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(report.read_text())["protocol"]["prompt"] == BIG_PROMPT
    assert temporaries(report.parent) == []


def test_a_lock_write_killed_midway_leaves_the_lock_and_the_next_write_sweeps_it(tmp_path: Path) -> None:
    """The lock was already replaced whole, but each killed write left its temporary for ever."""
    lock = tmp_path / "buildkit.lock"
    tags = [f"example.invalid/buun:tag-{i:05d}" for i in range(600)]  # a lock of about 25 KB
    lock.write_text(json.dumps({"lock_version": 1, "builds": {"cpu/server": {
        "image_id": "sha256:aaa", "image_digest": "sha256:aaa", "tags": tags, "pushed": []}}}))
    before = lock.read_bytes()
    with HostileServer("answer", answer=SANE) as server:
        args = ["bench", "--url", server.url, "--runs", "1", "--max-tokens", "5", "--attach-lock",
                "--lock-entry", "cpu/server", "--lock", str(lock)]
        proc = killed_mid_write(tmp_path, 16384, *args)
        assert proc.returncode == -signal.SIGXFSZ, proc.stdout + proc.stderr
        assert lock.read_bytes() == before and len(hidden(tmp_path)) == 1  # the killed write's temporary
        proc = run_cli(tmp_path, *args, env=buildkit_env(), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(lock.read_text())["builds"]["cpu/server"]["bench"]["runs"]
    assert hidden(tmp_path) == []  # whatever its name


# ------------------------------------------------------------------ class 6: the source on a full disk

def fork(root: Path) -> tuple[Path, str]:
    """A tiny local fork: one commit with one file."""
    from gitserver import commit_all, run_git

    run_git(root, "init", "-q", "-b", "main", "fork")
    (root / "fork" / "README").write_text("a tiny fork\n")
    return root / "fork", commit_all(root / "fork", "one", 1_700_000_000)


def render(cwd: Path, source: Path, commit: str, out: Path, cache: Path) -> subprocess.CompletedProcess:
    return run_cli(cwd, "render", "--arch", "cpu", "--source", str(source), "--commit", commit,
                   "--os-image", "buildkit-test/debian:bookworm", "--out", str(out), "--cache-dir", str(cache),
                   env={**buildkit_env(), "DOCKER_CONFIG": str(cwd / "no-docker-config")}, timeout=120)


def test_render_out_on_a_full_disk_is_one_line(tmp_path: Path) -> None:
    """The export of the tree into --out ended in an OSError traceback from tar extraction."""
    source, head = fork(tmp_path)
    (source / "big.bin").write_bytes(bytes(range(256)) * 512)  # 128 KB: more than the disk holds
    from gitserver import commit_all

    head = commit_all(source, "big", 1_700_000_100)
    with tmpfs(tmp_path / "disk") as disk:
        proc = render(tmp_path, source, head, disk / "out", tmp_path / "cache")
        if "base image" in proc.stderr:
            pytest.skip(f"the test base image is not in the engine: {proc.stderr}")
        one_error_line(proc, f"into {disk / 'out' / 'src'}: No space left on device")


def test_a_warm_cache_on_a_full_disk_and_a_new_commit_is_one_line(tmp_path: Path) -> None:
    """The mirror under a full cache could not take the new commit: a GitFailed traceback."""
    source, head = fork(tmp_path)
    cache = tmp_path / "cache"
    with tmpfs(cache / "git", "2m") as mirrors:  # the mirrors' folder; the base image's export beside it
        proc = render(tmp_path, source, head, tmp_path / "out1", cache)
        if "base image" in proc.stderr:
            pytest.skip(f"the test base image is not in the engine: {proc.stderr}")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        (source / "big.bin").write_bytes(bytes(range(256)) * 16384)  # 4 MB, over the 2 MB disk
        from gitserver import commit_all

        head = commit_all(source, "big", 1_700_000_100)
        fill(mirrors)
        proc = render(tmp_path, source, head, tmp_path / "out2", cache)
        one_error_line(proc, f"git failed in the mirror of {source} under {cache}: ")
