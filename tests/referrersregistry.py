"""A real registry with the OCI 1.1 referrers API for tests: go-containerregistry's pkg/registry (0.20.1, from
Debian's source; scripts/build-referrers-registry.sh builds it, `make setup` runs that) on 127.0.0.1, in memory.

    with ReferrersRegistry(binary, oci_subject=True) as reg:
        reg.host  # "127.0.0.1:PORT", plain http

oci_subject=False is 0.20.1 as shipped (no `OCI-Subject` header); True adds the header, as later releases
do. Both list the config's media type where a manifest's artifactType belongs (0.20.1's gap).

Module fixtures: ``referrers_registry`` (with the header) and ``referrers_registry_bare`` (without).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Self

import pytest
import requests

try:
    from fixtures_docker import unavailable
    from gitserver import free_port
except ImportError:  # imported as tests.referrersregistry
    from tests.fixtures_docker import unavailable  # type: ignore[no-redef]
    from tests.gitserver import free_port  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = ROOT / "scripts" / "build-referrers-registry.sh"


def registry_binary() -> Path:
    """The built registry (built now when missing, as `make setup` does); skipped locally, failed under CI."""
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=600, check=False)
    path = Path(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 and done.stdout.strip() else None
    if path is None or not path.is_file():
        unavailable(f"no referrers registry: {BUILD_SCRIPT.name} failed: {done.stderr.strip()[-300:]}")
    return path


class ReferrersRegistry:
    def __init__(self, binary: Path, *, oci_subject: bool) -> None:
        self.binary = binary
        self.oci_subject = oci_subject
        self.host = f"127.0.0.1:{free_port()}"
        self.url = f"http://{self.host}"
        self._proc: subprocess.Popen | None = None

    def start(self, timeout: float = 20.0) -> Self:
        argv = [str(self.binary), "-addr", self.host, *(["-oci-subject"] if self.oci_subject else [])]
        self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"the referrers registry exited {self._proc.returncode}")
            try:
                if requests.get(f"{self.url}/v2/", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.1)
        self.close()
        raise RuntimeError(f"the referrers registry did not answer on {self.url}/v2/ within {timeout} s")

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture(scope="module")
def referrers_registry() -> Iterator[ReferrersRegistry]:
    """The referrers API, and the OCI-Subject header on a push with a subject."""
    with ReferrersRegistry(registry_binary(), oci_subject=True) as reg:
        yield reg


@pytest.fixture(scope="module")
def referrers_registry_bare() -> Iterator[ReferrersRegistry]:
    """The referrers API without the OCI-Subject header: go-containerregistry 0.20.1 as Debian ships it."""
    with ReferrersRegistry(registry_binary(), oci_subject=False) as reg:
        yield reg
