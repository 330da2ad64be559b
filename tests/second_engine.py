"""A second Docker engine for tests and benches: a remote builder with nothing cached.

    with SecondEngine(Path("/tmp/x")) as engine:
        engine.env        # {"DOCKER_HOST": "unix:///tmp/.../docker.sock"} for the docker CLI and docker-py
        engine.load(ref)  # copy an image of the main engine into it (docker save | docker load)

It is its own dockerd with its own data root, exec root (and so its own managed containerd),
pidfile, config file and unix socket, all under the given folder, and its own bridge interface
(bk2-XXXXXX, 10.231.N.1/24, created here and deleted on exit) with `--iptables=false
--ip6tables=false --ip-forward=false`: no firewall rule and no sysctl is touched, and its RUN
steps and containers have a network namespace but no way out (BuildKit then answers network
steps from an imported layer cache only).

Never `--bridge=none`: a dockerd without a bridge deletes the host's default bridge interface
docker0 at start (moby's removeDefaultBridgeInterface), which cuts every container and build of
the main dockerd off its network. It keeps images in containerd's store, as the main engine here does, so
the OCI exporter path (reproducible digests) is the same. Stopped (SIGTERM, then SIGKILL) and its
folders removed on exit. Unix socket paths are limited to ~100 bytes, so the socket and exec root
live under a short /tmp folder of their own.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Self


class SecondEngine:
    def __init__(self, root: Path, *, start_timeout: float = 60) -> None:
        self.root = Path(root)
        self.start_timeout = start_timeout
        self.short = Path(tempfile.mkdtemp(prefix="bk2-", dir="/tmp"))
        self.socket = self.short / "docker.sock"
        self.bridge = "bk2-" + self.short.name[-6:].replace("_", "x")  # interface names: 15 bytes at most
        self.bridge_made = False
        self.address = ""
        self.proc: subprocess.Popen | None = None
        self.log_path = self.root / "dockerd.log"

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    @property
    def env(self) -> dict[str, str]:
        return {"DOCKER_HOST": self.host}

    def docker(self, *args: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
        env = dict(os.environ, **self.env)
        env.pop("DOCKER_CONTEXT", None)
        proc = subprocess.run(["docker", *args], env=env, capture_output=True, text=True, **kwargs)
        if check and proc.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args[:3])} on the second engine failed: {proc.stderr.strip()}")
        return proc

    def start(self) -> Self:
        if shutil.which("dockerd") is None:
            raise RuntimeError("dockerd is not installed")
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "daemon.json"
        config.write_text(json.dumps({"features": {"containerd-snapshotter": True}}))
        self._make_bridge()
        argv = ["dockerd", "--config-file", str(config), "--data-root", str(self.root / "data"),
                "--exec-root", str(self.short / "exec"), "--pidfile", str(self.root / "dockerd.pid"),
                "--host", self.host, "--bridge", self.bridge, "--iptables=false", "--ip6tables=false",
                "--ip-forward=false"]
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the second dockerd exited {self.proc.returncode}: {self._log_tail()}")
            if self.socket.exists() and self.docker("info", "--format", "{{.ServerVersion}}",
                                                    check=False).returncode == 0:
                return self
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"the second dockerd did not answer within {self.start_timeout:.0f}s: {self._log_tail()}")

    def _make_bridge(self) -> None:
        """A bridge of our own on a /24 no route uses (10.231.N.0/24)."""
        used = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True, check=True).stdout
        subnet = next((n for n in range(1, 250) if f"10.231.{n}." not in used), None)
        if subnet is None:
            raise RuntimeError("no free 10.231.N.0/24 for the second engine's bridge")
        self.address = f"10.231.{subnet}.1"  # the host's end of the bridge (tests/aptproxy.py listens there)
        for argv in (["ip", "link", "add", "name", self.bridge, "type", "bridge"],
                     ["ip", "addr", "add", f"10.231.{subnet}.1/24", "dev", self.bridge],
                     ["ip", "link", "set", self.bridge, "up"]):
            proc = subprocess.run(argv, capture_output=True, text=True)
            if proc.returncode != 0:
                self._drop_bridge()
                raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip()}")
            self.bridge_made = True

    def _drop_bridge(self) -> None:
        if self.bridge_made:
            subprocess.run(["ip", "link", "delete", self.bridge, "type", "bridge"], capture_output=True)
            self.bridge_made = False

    def _log_tail(self) -> str:
        try:
            return " | ".join(self.log_path.read_text(errors="replace").strip().splitlines()[-3:])
        except OSError:
            return "no log"

    def load(self, ref: str) -> None:
        """Copy an image of the main engine into this one."""
        save = subprocess.Popen(["docker", "save", ref], stdout=subprocess.PIPE)
        env = dict(os.environ, **self.env)
        load = subprocess.run(["docker", "load"], stdin=save.stdout, env=env, capture_output=True, text=True)
        save.stdout.close()  # type: ignore[union-attr]
        if save.wait() != 0 or load.returncode != 0:
            raise RuntimeError(f"copying {ref} into the second engine failed: {load.stderr.strip()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()  # this dockerd only: the process we started
                self.proc.wait()
        self.proc = None

    def close(self) -> None:
        self.stop()
        self._drop_bridge()
        for path in (self.root / "data", self.short):
            subprocess.run(["umount", "-R", str(path)], capture_output=True)  # leftover mounts, if any
            shutil.rmtree(path, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
