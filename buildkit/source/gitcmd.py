"""Every git command buildkit runs goes through here (GitPython's `Git.execute`, argv lists).

What each command gets:

* a deadline for the whole command (`LLAMA_BUILDKIT_GIT_TIMEOUT` seconds, default 900, or the
  caller's), after which its whole process group is stopped (SIGTERM, then SIGKILL);
* its own process group (a new session, core/children.py): Ctrl-C, SIGTERM and SIGHUP reach buildkit,
  which stops git's group itself, so git cannot turn an interrupt into a GitCommandError and no git
  process outlives buildkit;
* a bound on the processes of that group (MAX_PROCESSES): a git that keeps spawning itself (a
  partial clone fetching lazily over dumb HTTP did) is stopped and reported;
* no prompts (no terminal: GIT_TERMINAL_PROMPT=0, SSH_ASKPASS_REQUIRE=never), no lazy fetching
  (GIT_NO_LAZY_FETCH=1, git >= 2.45; older gits rely on source.py leaving no promisor remote), a
  stall limit for HTTP (GIT_HTTP_LOW_SPEED_*), C locale;
* credentials of a source URL (`https://user:token@host/...`) only through the environment: the URL
  git sees is the clean one, and a credential helper given in GIT_CONFIG_* variables prints the
  user name and secret from two more variables. Nothing of it is in argv or on disk, and the user's
  own helpers are switched off for that command so none of them stores the token.

A wait longer than WAIT_NOTICE seconds says on stderr what it waits for.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, BinaryIO, cast

import git

from buildkit.core import children
from buildkit.core.children import STOP_GRACE as STOP_GRACE  # re-exported: callers time git against it
from buildkit.core.children import group_size as _group_size, stop as stop_group
from buildkit.core.errors import SourceError
from buildkit.core.urlcreds import UrlAuth, clean_url, redact_url, split_credentials

TIMEOUT_ENV = "LLAMA_BUILDKIT_GIT_TIMEOUT"
DEFAULT_TIMEOUT = 900.0
MAX_PROCESSES = 32  # git, its remote helper, ssh, index-pack...: a handful; dozens means a runaway
WAIT_NOTICE = 10.0  # seconds before a wait says what it waits for, then every WAIT_REPEAT
WAIT_REPEAT = 30.0
_BASE_ENV = {
    "GIT_TERMINAL_PROMPT": "0", "SSH_ASKPASS_REQUIRE": "never", "GIT_NO_LAZY_FETCH": "1",
    "GIT_HTTP_LOW_SPEED_LIMIT": "1", "GIT_HTTP_LOW_SPEED_TIME": "60", "LC_ALL": "C", "LANGUAGE": "C",
}


class GitFailed(git.GitCommandError):
    """git exited non-zero; raw_stderr is what it said, as it said it."""

    def __init__(self, argv: list[str], status: int, stderr: str) -> None:
        super().__init__(argv, status, stderr)
        self.raw_stderr = stderr


def default_timeout() -> float:
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        raise SourceError(f"{TIMEOUT_ENV} must be a number of seconds, got {text!r}") from None
    if not value > 0:
        raise SourceError(f"{TIMEOUT_ENV} must be more than 0 seconds, got {text!r}")
    return value


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


class _Watchdog(threading.Thread):
    """Stops proc's group when the deadline passes or the group grows past MAX_PROCESSES; says what
    it waits for when the wait is long."""

    def __init__(self, proc: subprocess.Popen[Any], what: str, timeout: float, max_processes: int) -> None:
        super().__init__(daemon=True)
        self.proc, self.what, self.timeout, self.max_processes = proc, what, timeout, max_processes
        self.reason = ""
        self._done = threading.Event()

    def run(self) -> None:
        start = time.monotonic()
        notice = start + WAIT_NOTICE
        while not self._done.wait(0.25):
            now = time.monotonic()
            if now - start > self.timeout:
                self.reason = f"did not finish within {self.timeout:g} s"
            elif _group_size(self.proc.pid) > self.max_processes:
                self.reason = f"started more than {self.max_processes} processes"
            if self.reason:
                stop_group(self.proc)
                return
            if now >= notice:
                _say(f"buildkit: waiting for {self.what} ({now - start:.0f} s; gives up after {self.timeout:g} s)")
                notice = now + WAIT_REPEAT

    def stop(self) -> None:
        self._done.set()


class Git:
    """git bound to one repository (GIT_DIR) or to none, with credentials for one URL."""

    def __init__(self, git_dir: Path | None = None, *, auth: UrlAuth | None = None,
                 env: dict[str, str] | None = None, timeout: float | None = None) -> None:
        self.git_dir = git_dir
        self.auth = auth
        self.timeout = timeout
        self.env = dict(_BASE_ENV)
        if git_dir is not None:
            self.env["GIT_DIR"] = str(git_dir)
        if auth is not None:
            self.env.update(auth.env())
        self.env.update(env or {})
        self._runner = git.Git(str(git_dir) if git_dir is not None else None)

    def _start(self, args: tuple[str, ...],
               stdin: BinaryIO | None = None) -> tuple[list[str], subprocess.Popen[Any]]:
        argv = [git.Git.GIT_PYTHON_GIT_EXECUTABLE or "git", *args]
        # GitPython's AutoInterrupt handle terminates git when it is collected: it lives as long as proc
        handle = self._runner.execute(argv, as_process=True, env=self.env, istream=stdin,
                                      start_new_session=True)
        proc = children.adopt(cast("subprocess.Popen[Any]", handle.proc))  # started, so never None
        proc._buildkit_handle = handle  # type: ignore[attr-defined]  # our own attribute, to keep handle alive
        return argv, proc

    def _watch(self, proc: subprocess.Popen[Any], what: str, timeout: float | None) -> _Watchdog:
        limit = timeout if timeout is not None else (self.timeout or default_timeout())
        dog = _Watchdog(proc, what, limit, MAX_PROCESSES)
        dog.start()
        return dog

    @staticmethod
    def _failed(what: str, reason: str) -> SourceError:
        return SourceError(f"git {what} {reason}; it was stopped (raise {TIMEOUT_ENV} for a slow server)")

    def run(self, *args: str, what: str = "", timeout: float | None = None, stdin: BinaryIO | None = None) -> str:
        """stdout of `git ARGS` (stdin: a file to read from); GitFailed (with stderr) when git fails,
        SourceError when it is stopped for its deadline or its process count."""
        what = what or args[0]
        argv, proc = self._start(args, stdin)
        dog = self._watch(proc, what, timeout)
        try:
            out, err = proc.communicate()
        except BaseException:  # KeyboardInterrupt included: git must not outlive us
            dog.stop()
            stop_group(proc)
            raise
        finally:
            dog.stop()
        children.finish(proc)
        if dog.reason:
            raise self._failed(what, dog.reason)
        if proc.returncode != 0:
            raise GitFailed(argv, proc.returncode, err.decode("utf-8", "replace"))
        text: str = out.decode("utf-8", "replace")  # communicate() of a binary pipe: bytes
        return text.rstrip("\n")

    def ok(self, *args: str, what: str = "", timeout: float | None = None) -> bool:
        """True when `git ARGS` exits 0 (a check such as cat-file -e)."""
        try:
            self.run(*args, what=what, timeout=timeout)
            return True
        except git.GitCommandError:
            return False

    @contextmanager
    def stream(self, *args: str, what: str = "", timeout: float | None = None) -> Iterator[IO[bytes]]:
        """`git ARGS` with its stdout to read; checked (and stopped if need be) when the block ends."""
        what = what or args[0]
        argv, proc = self._start(args)
        stdout, stderr = proc.stdout, proc.stderr
        assert stdout is not None and stderr is not None  # GitPython pipes both
        dog = self._watch(proc, what, timeout)
        try:
            yield stdout
            stdout.read()  # drain what the reader left, so git can exit
            err = stderr.read()
            proc.wait()
        except BaseException:
            dog.stop()
            stop_group(proc)
            if dog.reason:
                raise self._failed(what, dog.reason) from None
            raise
        finally:
            dog.stop()
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        children.finish(proc)
        if dog.reason:
            raise self._failed(what, dog.reason)
        if proc.returncode != 0:
            raise GitFailed(argv, proc.returncode, err.decode("utf-8", "replace"))


__all__ = ["Git", "GitFailed", "UrlAuth", "clean_url", "default_timeout", "redact_url", "split_credentials"]
