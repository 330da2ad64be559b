"""llama-server as a local process, for the workload checks (bench/workload.py's `Servers`) on a host without
Docker: a bundle's server (its library plan's LD_LIBRARY_PATH and working folder, libplan.py), a native build's,
or any llama-server binary. Each server gets the target model, the draft model when asked, `--host 127.0.0.1
--port N` and the check's arguments; it is ready when /health answers 200, and stopped (SIGTERM, then SIGKILL)
when the with-block ends. Every server's output is kept in its own log under `logs`, named by its number and
label; a server that exits or never becomes healthy is a BenchError with its log's last lines.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from buildkit.core.errors import BenchError


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _health(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, ValueError):
        return None


def _tail(path: Path, lines: int = 12) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 16384))
            text = fh.read().decode(errors="replace")
    except OSError:
        return ""
    return " | ".join(ln.strip() for ln in text.splitlines()[-lines:] if ln.strip())


def stop(proc: subprocess.Popen[bytes], grace: float = 20.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class LocalServers:
    """Starts `exe` with `model` (and `draft`); see the module's text."""

    exe: Path
    model: Path
    draft: Path | None
    logs: Path
    env: dict[str, str] = field(default_factory=dict)  # added to this process's environment (LD_LIBRARY_PATH)
    cwd: Path | None = None
    extra: tuple[str, ...] = ()  # arguments every server gets (e.g. -ngl 99)
    startup_timeout: float = 300.0
    started: int = 0
    ready_s: list[float] = field(default_factory=list)

    def argv(self, args: Sequence[str], draft: bool, port: int) -> list[str]:
        argv = [str(self.exe), "-m", str(self.model), *self.extra]
        if draft:
            if self.draft is None:
                raise BenchError("this check needs a draft model (--model-draft)")
            argv += ["-md", str(self.draft)]
        return argv + ["--host", "127.0.0.1", "--port", str(port), *args]

    @contextmanager
    def serve(self, label: str, args: Sequence[str], draft: bool) -> Iterator[str]:
        self.started += 1
        self.logs.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", label).strip("-")[:60] or "server"
        log = self.logs / f"{self.started:03d}-{name}.log"
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        argv = self.argv(args, draft, port)
        env = dict(os.environ, **self.env)
        env.pop("LLAMA_ARG_HOST", None)
        env.pop("LLAMA_ARG_PORT", None)
        with open(log, "wb") as fh:
            fh.write(("$ " + " ".join(argv) + "\n").encode())
            fh.flush()
            proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, cwd=self.cwd, env=env,
                                    start_new_session=True)
        try:
            started = time.monotonic()
            while True:
                code = proc.poll()
                if code is not None:
                    raise BenchError(f"llama-server ({label}) exited with {code} before /health answered: "
                                     f"{_tail(log)} (log {log})")
                if _health(url) == 200:
                    break
                if time.monotonic() - started > self.startup_timeout:
                    raise BenchError(f"llama-server ({label}) not healthy within {self.startup_timeout:g}s "
                                     f"(log {log}): {_tail(log)}")
                time.sleep(0.2)
            self.ready_s.append(time.monotonic() - started)
            yield url
            if proc.poll() is not None:
                raise BenchError(f"llama-server ({label}) exited with {proc.returncode} during the check: "
                                 f"{_tail(log)} (log {log})")
        finally:
            stop(proc)
