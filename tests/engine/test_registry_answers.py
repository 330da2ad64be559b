"""A registry answer counts only when it is whole and vouched for (issue 22, class 1). Real servers on
127.0.0.1 (tests/hostile.py, `answer` mode) send an answer cut in its headers or its body, a manifest
with nothing to check it against, or a PUT they do not acknowledge; each is one RegistryError line,
never a success. Answers cut at their deadline, and the overall deadlines, are in test_deadlines.py."""

from __future__ import annotations

import hashlib
import json

import pytest

from buildkit.core.errors import RegistryError
from buildkit.oci.registry import OCI_MANIFEST, RegistryClient
from hostile import HostileServer

MANIFEST = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": []}).encode()
DIGEST = "sha256:" + hashlib.sha256(MANIFEST).hexdigest()
BLOB = "sha256:" + "b" * 64


def client(server: HostileServer) -> RegistryClient:
    return RegistryClient(server.host, timeout=5, retries=1, backoff=0)


def answer(status: str, *headers: str, body: bytes = b"") -> bytes:
    return "\r\n".join([f"HTTP/1.1 {status}", *headers, "", ""]).encode() + body


# each operation, and the answer's start a cut leaves (a status line and part of the headers)
CUT_IN_HEADERS = {
    "head_manifest": (lambda c: c.head_manifest("team/app", "latest"),
                      b"HTTP/1.1 200 OK\r\nContent-Type: " + OCI_MANIFEST.encode() + b"\r\n"),
    "get_manifest": (lambda c: c.get_manifest("team/app", "latest"), b"HTTP/1.1 200 OK\r\nContent-Ty"),
    "put_manifest": (lambda c: c.put_manifest("team/app", "latest", MANIFEST, OCI_MANIFEST),
                     b"HTTP/1.1 201 Created\r\nLocation: /v2/team/app/manifests/" + DIGEST.encode() + b"\r\n"),
    "upload_blob": (lambda c: c.upload_blob("team/app", BLOB, b"x", 1), b"HTTP/1.1 201 Created\r\nLoc"),
}


@pytest.mark.parametrize("op", CUT_IN_HEADERS)
def test_an_answer_cut_in_its_headers_is_an_error(op: str) -> None:
    call, start = CUT_IN_HEADERS[op]
    with HostileServer("answer", answer=start, registry=True) as server, client(server) as c:
        with pytest.raises(RegistryError) as caught:
            call(c)
    assert f"registry {server.host}" in str(caught.value) and "\n" not in str(caught.value)


def test_an_answer_cut_in_its_headers_never_says_a_blob_is_there() -> None:
    with HostileServer("answer", answer=b"HTTP/1.1 200 OK\r\nContent-Len", registry=True) as server, \
            client(server) as c:
        assert c.blob_exists("team/app", BLOB) is False  # so it is uploaded, never skipped


def test_a_body_shorter_than_its_content_length_is_an_error() -> None:
    cut = answer("200 OK", f"Content-Type: {OCI_MANIFEST}", f"Content-Length: {len(MANIFEST)}",
                 f"Docker-Content-Digest: {DIGEST}", body=MANIFEST[:10])
    with HostileServer("answer", answer=cut, registry=True) as server, client(server) as c:
        with pytest.raises(RegistryError, match="connection"):
            c.get_manifest("team/app", "latest")


@pytest.mark.parametrize("headers, said", [
    ((), "no Docker-Content-Digest"),  # by tag, nothing to check the bytes against
    ((f"Docker-Content-Digest: sha256:{'0' * 64}",), "sha256:0000"),  # another digest
])
def test_a_manifest_by_tag_counts_only_with_a_matching_digest(headers: tuple[str, ...], said: str) -> None:
    whole = answer("200 OK", f"Content-Type: {OCI_MANIFEST}", f"Content-Length: {len(MANIFEST)}", *headers,
                   body=MANIFEST)
    with HostileServer("answer", answer=whole, registry=True) as server, client(server) as c:
        with pytest.raises(RegistryError, match=said):
            c.get_manifest("team/app", "latest")


def test_an_empty_manifest_is_refused_even_with_its_digest() -> None:
    empty = "sha256:" + hashlib.sha256(b"").hexdigest()
    lying = answer("200 OK", f"Content-Type: {OCI_MANIFEST}", "Content-Length: 0", f"Docker-Content-Digest: {empty}")
    with HostileServer("answer", answer=lying, registry=True) as server, client(server) as c:
        with pytest.raises(RegistryError, match=r"\(0 bytes\) does not match"):
            c.head_manifest("team/app", "latest")  # HEAD without a digest falls back to GET


@pytest.mark.parametrize("status, digest", [
    ("202 Accepted", DIGEST), ("200 OK", DIGEST),  # not the documented 201 Created
    ("201 Created", None), ("201 Created", "sha256:" + "0" * 64),  # not acknowledged: no or another digest
])
def test_a_manifest_put_counts_only_with_201_and_its_digest(status: str, digest: str | None) -> None:
    headers = ["Content-Length: 0"] + ([f"Docker-Content-Digest: {digest}"] if digest else [])
    with HostileServer("answer", answer=answer(status, *headers), registry=True) as server, client(server) as c:
        with pytest.raises(RegistryError) as caught:
            c.put_manifest("team/app", "latest", MANIFEST, OCI_MANIFEST)
    assert "put manifest team/app:latest failed" in str(caught.value)


@pytest.mark.parametrize("status, digest", [("204 No Content", BLOB), ("201 Created", None)])
def test_a_blob_put_counts_only_with_201_and_its_digest(status: str, digest: str | None) -> None:
    session = answer("202 Accepted", "Location: /v2/team/app/blobs/uploads/u1", "Content-Length: 0")
    put = answer(status, "Content-Length: 0", *([f"Docker-Content-Digest: {digest}"] if digest else []))
    with HostileServer("answer", answer={"POST": session, "PUT": put}, registry=True) as server, \
            client(server) as c:
        with pytest.raises(RegistryError, match="upload blob"):
            c.upload_blob("team/app", BLOB, b"x", 1)


# issue 48: a reason phrase and an error body that speak to the terminal: the window title (OSC 0), the
# clipboard (OSC 52), a DCS string, the alternate screen (CSI ?1049h) and a C1 CSI (one byte, U+009B)
TERMINAL = "\x1b]0;pwned\x07\x1b]52;c;ZXZpbA==\x07\x1bP1$qm\x1b\\\x1b[?1049h\x9b2J\u202e"


def test_a_registry_reason_phrase_never_reaches_the_terminal_raw(tmp_path) -> None:
    """The reason phrase and the error body's message are the registry's words: `buildkit verify-image`
    prints its one error line with each control character shown as its escape, none sent as it came."""
    from cliutil import run_cli

    body = json.dumps({"errors": [{"code": "DENIED", "message": "no" + TERMINAL}]}).encode()
    refusal = answer("400 Bad Request" + TERMINAL, "Content-Type: application/json", f"Content-Length: {len(body)}",
                     "Connection: close", body=body)
    from buildkit.release.signkeys import generate_keys

    generate_keys(tmp_path / "k.key", tmp_path / "k.pub")
    with HostileServer("answer", answer=refusal, registry=True) as server:
        done = run_cli(tmp_path, "verify-image", f"{server.host}/team/app:v1", "--key", str(tmp_path / "k.pub"))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    said = done.stdout + done.stderr
    assert "400 Bad Request" in said, said
    assert not any(c in said for c in "\x1b\x07\x9b\u202e"), ascii(said)
    assert "\\x1b]52;c;ZXZpbA==" in said and "\\x9b2J" in said  # shown, not acted on
