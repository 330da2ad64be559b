"""Malformed input gives one line naming the file (or server), the key and what was expected; never a
traceback. Registry answers come from a loopback server that serves nonsense a real registry would
not (so it cannot be the real registry); files are written by the test and read by the real CLI."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from buildkit.core.errors import RegistryError
from buildkit.release.publish import image_labels
from buildkit.oci.registry import OCI_MANIFEST, RegistryClient
from cliutil import buildkit_env

ROOT = Path(__file__).resolve().parents[2]
DIGEST_OF = lambda body: "sha256:" + hashlib.sha256(body).hexdigest()  # noqa: E731


class NonsenseRegistry:
    """/v2/ answers 200; the manifest of any reference is `manifest`; any blob is `blob`."""

    def __init__(self, manifest: bytes, blob: bytes = b"{}") -> None:
        self.manifest, self.blob = manifest, blob
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _answer(self, body: bytes, content_type: str = "application/json") -> None:
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Docker-Content-Digest", DIGEST_OF(body))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def do_GET(self) -> None:
                if "/manifests/" in self.path:
                    self._answer(owner.manifest, OCI_MANIFEST)
                elif "/blobs/" in self.path:
                    self._answer(owner.blob)
                else:
                    self._answer(b"{}")

            do_HEAD = do_GET

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.host = f"127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> NonsenseRegistry:
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


CONFIG = json.dumps({"config": {"Labels": {"org.opencontainers.image.revision": "c" * 40}}}).encode()
GOOD_MANIFEST = json.dumps({"schemaVersion": 2, "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                                           "digest": DIGEST_OF(CONFIG), "size": len(CONFIG)},
                            "layers": []}).encode()


def test_a_good_manifest_gives_its_labels() -> None:
    with NonsenseRegistry(GOOD_MANIFEST, CONFIG) as registry:
        with RegistryClient(registry.host, timeout=5) as client:
            labels = image_labels(client, "team/app", DIGEST_OF(GOOD_MANIFEST))
    assert labels == {"org.opencontainers.image.revision": "c" * 40}


@pytest.mark.parametrize("manifest, blob, said", [
    (b"not json", b"{}", "the manifest is not JSON"),
    (b"[1, 2]", b"{}", "must be a JSON object"),
    (b'{"schemaVersion": 2}', b"{}", "the manifest has no config"),
    (b'{"config": "sha256:abc"}', b"{}", "'config' must be an object"),
    (b'{"config": {"digest": 5}}', b"{}", "malformed descriptor"),
    (b'{"manifests": [{"digest": null}]}', b"{}", "malformed descriptor"),
    (b'{"manifests": {"a": 1}}', b"{}", "'manifests' must be a list"),
    (GOOD_MANIFEST, b"{not json", "digest"),  # the blob does not match the config digest
])
def test_nonsense_manifests_are_one_line(manifest: bytes, blob: bytes, said: str) -> None:
    with NonsenseRegistry(manifest, blob) as registry:
        with RegistryClient(registry.host, timeout=5) as client:
            with pytest.raises(RegistryError) as caught:
                image_labels(client, "team/app", DIGEST_OF(manifest))
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_promote_against_a_nonsense_registry_is_one_line(tmp_path: Path) -> None:
    with NonsenseRegistry(b'{"schemaVersion": 2}') as registry:
        proc = cli(tmp_path, "promote", "nightly-cpu", "--release", "1.0.0", "--image", f"{registry.host}/team/app")
    assert_one_line(proc, "has no config")


def cli(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "buildkit.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**buildkit_env(), "PYTHONPATH": str(ROOT),
                                            "DOCKER_CONFIG": str(cwd / "no-docker-config"), **(env or {})})


def assert_one_line(proc: subprocess.CompletedProcess, said: str) -> None:
    assert proc.returncode == 1, proc.stdout + proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and said in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_config_that_is_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "buildkit.toml").write_bytes(b'schema_version = 1\n[image]\nname = "\xff\xfe"\n')
    assert_one_line(cli(tmp_path, "config"), "buildkit.toml: not valid TOML: the file is not UTF-8")


def test_config_that_is_a_folder(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    assert_one_line(cli(tmp_path, "config", env={"LLAMA_BUILDKIT_CONFIG": str(tmp_path / "conf")}), "is a folder")


def test_out_under_a_regular_file(tmp_path: Path) -> None:
    from gitserver import commit_all, run_git

    run_git(tmp_path, "init", "-q", "-b", "main", "fork")
    head = commit_all(tmp_path / "fork", "one", 1_700_000_000)
    (tmp_path / "file").write_text("x")
    proc = cli(tmp_path, "render", "--arch", "cpu", "--source", str(tmp_path / "fork"), "--commit", head,
               "--os-image", "buildkit-test/debian:bookworm", "--out", str(tmp_path / "file" / "ctx"),
               "--cache-dir", str(tmp_path / "cache"))
    if "base image" in proc.stderr:
        pytest.skip("the test base image is not in the engine")
    assert_one_line(proc, "cannot create the folder")


@pytest.mark.parametrize("text, said", [
    ('{"lock_version":1,"builds":[{}]}', "builds: expected an object of variant/target entries, got a list"),
    ('{"lock_version":1,"builds":{"cpu/server":{"image_id":5}}}', "builds['cpu/server'].image_id: expected a string"),
    ('{"lock_version":1,"builds":{"cpu/server":[]}}', "builds['cpu/server']: expected an object"),
    ('{"lock_version":1,"builds":{"cpu/ser', "cannot read the lock file (it is left as it is)"),
    ('{"lock_version":2,"builds":{}}', "lock_version: expected 1"),
])
def test_malformed_locks_are_one_line_and_left_alone(tmp_path: Path, text: str, said: str) -> None:
    lock = tmp_path / "buildkit.lock"
    lock.write_text(text)
    for args in (["push", "--arch", "cpu", "--image", "127.0.0.1:9/x"], ["reproduce", str(lock)],
                 ["bench", "--url", "http://127.0.0.1:9", "--attach-lock", "--lock-entry", "cpu/server",
                  "--lock", str(lock)]):
        proc = cli(tmp_path, *args)  # bench reads the lock before it measures anything
        assert_one_line(proc, said)
        assert lock.read_text() == text  # never overwritten
