"""Bench: bytes the source stage fetches, cold vs warm mirror, against a full `git clone --mirror`.

Makes an upstream repository with some history (200 commits over 100 files, a few MB), serves it with
`git daemon` on 127.0.0.1 (one copy allowing partial-clone filters as GitHub does, one not), and prints
the pack bytes each fetch received (SourceInfo.bytes_fetched) next to a full `git clone --mirror`. Run: python bench/fetch_bytes.py [--commits N]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from buildkit.source.fetch import fetch_source, mirror_dir
from gitserver import commit_all, run_git, serve

def _text(rng: random.Random, lines: int) -> str:
    return "".join(" ".join(f"{rng.getrandbits(32):08x}" for _ in range(10)) + "\n" for _ in range(lines))


def make_upstream(path: Path, commits: int, files: int = 100) -> list[str]:
    rng = random.Random(42)
    path.parent.mkdir(parents=True, exist_ok=True)
    run_git(path.parent, "init", "-q", "-b", "main", path.name)
    for i in range(files):
        (path / f"src{i % 6}").mkdir(exist_ok=True)
        (path / f"src{i % 6}" / f"f{i}.c").write_text(_text(rng, 300))
    shas = [commit_all(path, "initial", 1_700_000_000)]
    for n in range(1, commits):
        for i in rng.sample(range(files), 4):  # each commit rewrites a slice of four files
            target = path / f"src{i % 6}" / f"f{i}.c"
            lines = target.read_text().splitlines(keepends=True)
            start = rng.randrange(len(lines))
            lines[start:start + 50] = _text(rng, 50).splitlines(keepends=True)
            target.write_text("".join(lines))
        shas.append(commit_all(path, f"change {n}", 1_700_000_000 + 60 * n))
    return shas


def bare_copy(src: Path, dest: Path, allow_filter: bool) -> Path:
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(dest)], check=True)
    run_git(dest, "config", "uploadpack.allowFilter", "true" if allow_filter else "false")
    run_git(dest, "gc", "-q")
    return dest


def objects_size(git_dir: Path) -> int:
    return sum(f.stat().st_size for f in (git_dir / "objects").rglob("*") if f.is_file())


def fmt(n: int) -> str:
    return f"{n / 1e6:.3f} MB" if n >= 100_000 else f"{n / 1e3:.1f} kB"


def timed_fetch(url: str, ref: str, pin: str | None, cache: Path):
    start = time.perf_counter()
    info = fetch_source(url, ref, pin, cache)
    return info, time.perf_counter() - start


def full_clone(url: str, dest: Path) -> tuple[int, int, float]:
    """Network pack bytes, disk bytes and seconds of `git clone --mirror`."""
    trace = dest.with_suffix(".packs")
    start = time.perf_counter()
    subprocess.run(["git", "clone", "-q", "--mirror", url, str(dest)], check=True,
                   env={**os.environ, "GIT_TRACE_PACKFILE": str(trace)})
    return trace.stat().st_size, objects_size(dest), time.perf_counter() - start


def bench(url: str, shas: list[str], work: Path, label: str, full: int) -> None:
    cache = work / f"cache-{label}"
    pinned, newer = shas[-11], shas[-1]  # the pin is ten commits behind the tip
    cold, t_cold = timed_fetch(url, pinned, pinned, cache)
    content = mirror_dir(cache, url)
    history = content.with_name(content.stem + ".history.git")
    disk = f"on disk: snapshot {fmt(objects_size(content))}, commit history {fmt(objects_size(history))}"
    warm, t_warm = timed_fetch(url, pinned, pinned, cache)
    nxt, t_next = timed_fetch(url, newer, newer, cache)
    assert cold.build_number == len(shas) - 10 and nxt.build_number == len(shas)
    assert not warm.fetched and warm.bytes_fetched == 0

    def row(name: str, got: int, secs: float, note: str = "") -> None:
        print(f"  {name:30s} {fmt(got):>10s}  {got / full:6.3f} x full  {secs:5.2f}s  {note}")

    print(f"[{label}]")
    row("cold mirror, pinned commit", cold.bytes_fetched, t_cold, f"({disk})")
    row("warm mirror, same commit", warm.bytes_fetched, t_warm, f"(fetched={warm.fetched})")
    row("warm mirror, commit +10", nxt.bytes_fetched, t_next)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--commits", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shas = make_upstream(work / "work" / "proj", args.commits)
        filtered = bare_copy(work / "work" / "proj", work / "srv" / "proj.git", allow_filter=True)
        bare_copy(work / "work" / "proj", work / "srv" / "nofilter.git", allow_filter=False)
        files = len(run_git(filtered, "ls-tree", "-r", "HEAD").splitlines())
        print(f"upstream: {len(shas)} commits, {files} files, packed {fmt(objects_size(filtered))}; "
              f"bytes = pack bytes received over git://")
        with serve(work / "srv") as daemon:
            full, full_disk, t_full = full_clone(f"{daemon.url}/proj.git", work / "full.git")
            print(f"  {'full `git clone --mirror`':30s} {fmt(full):>10s}  {1:6.3f} x full  {t_full:5.2f}s  "
                  f"(on disk {fmt(full_disk)})")
            bench(f"{daemon.url}/proj.git", shas, work, "server allows filters (GitHub-like)", full)
            bench(f"{daemon.url}/nofilter.git", shas, work, "server without filters", full)


if __name__ == "__main__":
    main()
