"""release/signkeys.py and release/cosignformat.py (issue 38): the key pair, where the key is read from, and
cosign's formats."""

from __future__ import annotations

import base64
import json
import os
import stat

import pytest

from buildkit.core.errors import ConfigError
from buildkit.release import cosignformat as cf
from buildkit.release.signkeys import KEY_ENV, generate_keys, load_public_key, load_signing_key, verifies


def test_generate_writes_a_private_key_only_its_owner_reads_and_never_replaces_it(tmp_path):
    generate_keys(tmp_path / "k.key", tmp_path / "k.pub")
    assert stat.S_IMODE((tmp_path / "k.key").stat().st_mode) == 0o600
    before = (tmp_path / "k.key").read_bytes()
    with pytest.raises(ConfigError, match="does not replace a signing key"):
        generate_keys(tmp_path / "k.key", tmp_path / "k2.pub")
    assert (tmp_path / "k.key").read_bytes() == before
    key = load_signing_key(tmp_path / "k.key", env={})
    assert key is not None and verifies(load_public_key(tmp_path / "k.pub"), key.sign(b"x"), b"x")


def test_the_key_comes_from_the_variable_and_no_message_holds_its_text(tmp_path):
    generate_keys(tmp_path / "k.key", tmp_path / "k.pub")
    pem = (tmp_path / "k.key").read_text()
    key = load_signing_key(None, env={KEY_ENV: pem})
    assert key is not None and key.origin == KEY_ENV and key.public_pem() == (tmp_path / "k.pub").read_bytes()
    assert load_signing_key(None, env={}) is None
    broken = pem.replace(pem.splitlines()[1], "A" * 64)
    with pytest.raises(ConfigError) as caught:
        load_signing_key(None, env={KEY_ENV: broken})
    assert KEY_ENV in str(caught.value) and "A" * 16 not in str(caught.value) and "PRIVATE" not in str(caught.value)


def test_keys_generate_names_the_settings_as_they_are(tmp_path):
    """Its message names sign.key_file and its variable (it said sign.key, which buildkit.toml refuses)."""
    import re

    from click.testing import CliRunner

    from buildkit.cli.main import main
    from buildkit.plan.config import KEY_BY_NAME, KEYS

    result = CliRunner().invoke(main, ["keys", "generate", "--out", str(tmp_path / "k.key")])
    assert result.exit_code == 0, result.output
    named = re.findall(r"\bsign\.[a-z_]+", result.output)
    assert named == ["sign.key_file"] and all(name in KEY_BY_NAME for name in named)
    variables = set(re.findall(r"LLAMA_BUILDKIT_[A-Z_]+", result.output))
    assert variables == {KEY_BY_NAME["sign.key_file"].env_var, KEY_ENV}
    assert variables <= {k.env_var for k in KEYS} | {KEY_ENV}


def test_dsse_pae_is_the_specifications():
    # the DSSE protocol's own example (secure-systems-lab/dsse, protocol.md)
    assert cf.pae("http://example.com/HelloWorld", b"hello world") == \
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"


def test_cosign_tags_and_the_simple_signing_payload():
    digest = "sha256:" + "ab" * 32
    assert cf.tag_for(digest, "sig") == "sha256-" + "ab" * 32 + ".sig"
    payload = json.loads(cf.simple_signing_payload("reg/x", digest))
    assert payload["critical"] == {"identity": {"docker-reference": "reg/x"},
                                   "image": {"docker-manifest-digest": digest},
                                   "type": "cosign container image signature"}
    layer = cf.signature_layer(b"p", b"s")
    body, config = cf.manifest([layer])
    doc = json.loads(body)
    assert doc["layers"][0]["annotations"] == {cf.SIGNATURE_ANNOTATION: base64.b64encode(b"s").decode()}
    assert doc["config"]["digest"] == cf.sha256_digest(config)


# issue 48, item 6: `keys generate` never loses a key (through the real CLI)

def test_an_out_ending_in_pub_is_refused_and_writes_nothing(cli, tmp_path):
    done = cli("keys", "generate", "--out", "x.pub")
    assert done.returncode == 1 and done.stderr.count("error:") == 1 and "Traceback" not in done.stderr
    assert "x.pub" in done.stderr and "written over the private key" in done.stderr
    assert not (tmp_path / "x.pub").exists()


@pytest.mark.parametrize("out", [".", "/", "", "keys/"])
def test_an_out_that_names_a_folder_is_one_line(cli, tmp_path, out):
    (tmp_path / "keys").mkdir()
    done = cli("keys", "generate", "--out", out)
    assert done.returncode == 1 and done.stderr.count("error:") == 1 and "Traceback" not in done.stderr, done.stderr
    assert "names a folder" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == ["keys"]


def test_an_existing_public_key_is_never_replaced(cli, tmp_path):
    (tmp_path / "cosign.pub").write_text("someone verifies with this\n")
    done = cli("keys", "generate")
    assert done.returncode == 1 and "cosign.pub exists" in done.stderr and "public key" in done.stderr
    assert (tmp_path / "cosign.pub").read_text() == "someone verifies with this\n"
    assert not (tmp_path / "cosign.key").exists()


def test_both_halves_have_their_modes_whatever_the_umask(cli, tmp_path):
    old = os.umask(0)  # the child inherits it
    try:
        done = cli("keys", "generate", "--out", "k.key")
    finally:
        os.umask(old)
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE((tmp_path / "k.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "k.pub").stat().st_mode) == 0o644
    assert 'sign.key_file = "k.key"' in done.stdout and "sign.key " not in done.stdout
    key = load_signing_key(tmp_path / "k.key", env={})
    assert key is not None and key.warning == ""


def test_a_public_key_that_cannot_be_written_is_named_and_leaves_no_half_pair(cli, tmp_path):
    """The private key's name fits, its public key's (4 bytes longer) does not: the error names the .pub, and
    no private key is left without its public half."""
    out = "k" * 253 + ".k"  # 255 bytes: NAME_MAX; its .pub is 257
    done = cli("keys", "generate", "--out", out)
    assert done.returncode == 1 and done.stderr.count("error:") == 1, done.stderr
    assert f"public key {'k' * 253}.pub" in done.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name != "cache"] == []


def test_a_key_file_others_can_read_is_used_with_a_warning(cli, tmp_path):
    generate_keys(tmp_path / "k.key", tmp_path / "k.pub")
    (tmp_path / "k.key").chmod(0o644)
    key = load_signing_key(tmp_path / "k.key", env={})
    assert key is not None and "can be read by others (mode 0644)" in key.warning and "chmod 600" in key.warning
    (tmp_path / "k.key").chmod(0o600)
    again = load_signing_key(tmp_path / "k.key", env={})
    assert again is not None and again.warning == ""
    (tmp_path / "k.key").chmod(0o640)
    done = cli("push", "--sign-key", "k.key", "--arch", "cpu")  # the key is read first; no lock: one error after
    assert "warning: the signing key k.key can be read by others (mode 0640)" in done.stderr, done.stderr
    assert done.returncode == 1 and done.stderr.count("error:") == 1
