"""Signing keys (issue 38): an ECDSA P-256 key pair, as cosign's own `--key` files use; a loaded private key
(`SigningKey`) is the key file's signer (release/signer.Signer, issue 49).

The private key is a PKCS#8 PEM written with mode 0600 from its creation; buildkit reads it from a file
or from the variable LLAMA_BUILDKIT_SIGN_KEY (the PEM text itself), never from argv, and never says it
in a message, a label or a log. The public key is a PEM SubjectPublicKeyInfo, what `cosign verify --key`
takes. Signatures are ECDSA over SHA-256, DER-encoded, as cosign writes and verifies them.

Written with `cryptography` (pyca): the reference Python binding of OpenSSL for these primitives.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, replace
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from buildkit.core.boundedread import read_regular
from buildkit.core.errors import ConfigError
from buildkit.core.wholefile import write_whole
from buildkit.release import cosignformat as cf
from buildkit.release import sigstorebundle as sb

KEY_ENV = "LLAMA_BUILDKIT_SIGN_KEY"  # the private key's PEM text (a CI secret)
KEY_LIMIT = 64 * 1024


@dataclass(frozen=True)
class SigningKey:
    """A private key and where it came from (a file's path or the variable's name: never its text): the key
    file's Signer (release/signer.py), whose signatures cosign verifies with `--key` and its public half."""

    key: ec.EllipticCurvePrivateKey
    origin: str
    warning: str = ""  # what the CLI says before using it (a key file others can read)

    @property
    def name(self) -> str:
        return self.origin

    @property
    def public_key(self) -> ec.EllipticCurvePublicKey:
        return self.key.public_key()

    def sign(self, data: bytes) -> bytes:
        return self.key.sign(data, ec.ECDSA(hashes.SHA256()))

    def signature_layer(self, payload: bytes) -> cf.Layer:
        return cf.signature_layer(payload, self.sign(payload))

    def envelope(self, statement: bytes) -> bytes:
        return cf.envelope(statement, self.sign(cf.pae(cf.IN_TOTO, statement)))

    def bundle(self, envelope: bytes) -> bytes:
        return sb.bundle(envelope, sb.key_hint(self.public_key))

    def public_pem(self) -> bytes:
        return public_pem(self.key.public_key())


def public_pem(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def key_pair_paths(out: Path) -> tuple[Path, Path]:
    """(private, public) for `keys generate --out OUT`: OUT and OUT with the suffix .pub. OUT must name a file
    whose public half is another file: `.`, `/`, `''`, a folder and `x.pub` (whose public half would be
    itself) are refused in one line."""
    if not out.name or out.name in (".", "..") or out.is_dir():
        raise ConfigError(f"--out {str(out)!r} names a folder, not the private key's file (e.g. --out cosign.key)")
    public = out.with_suffix(".pub")
    if public == out:
        raise ConfigError(f"--out {out} ends in .pub: the public key would be written over the private key; "
                          "name the private key's file (e.g. --out cosign.key)")
    return out, public


def generate_keys(private_path: Path, public_path: Path) -> None:
    """Write a new key pair: the private key 0600 and the public key 0644, whatever the umask, each whole.
    Neither half replaces a file (an existing private key's signatures would no longer verify with anything
    published; an existing public key is what someone verifies with): a path that exists is refused before
    anything is written, and the write itself never replaces one made meanwhile. A failed write names its file
    and leaves no half pair: the public key goes first, the private key, once written, is the pair."""
    if private_path == public_path:
        raise ConfigError(f"{private_path} cannot hold both halves of the key pair")
    for path, half in ((private_path, "signing key"), (public_path, "public key")):
        try:
            os.lstat(path)
        except FileNotFoundError:
            continue
        except OSError as exc:  # a name too long, a parent that is a file: this half cannot be written
            raise ConfigError(f"cannot write the {half} {path}: {exc.strerror or exc}") from None
        raise ConfigError(f"{path} exists: buildkit does not replace a {half}; remove it or name another "
                          "file with --out")
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    _write_new(public_path, public_pem(key.public_key()), "public key", mode=0o644)
    try:
        _write_new(private_path, pem, "signing key", mode=0o600)
    except ConfigError:
        public_path.unlink(missing_ok=True)  # ours, written a moment ago: no public key without its private key
        raise


def _write_new(path: Path, data: bytes, half: str, *, mode: int) -> None:
    try:
        write_whole(path, data, private=mode == 0o600, mode=mode, replace=False)
    except FileExistsError:
        raise ConfigError(f"{path} exists: buildkit does not replace a {half}; remove it or name another "
                          "file with --out") from None
    except OSError as exc:
        raise ConfigError(f"cannot write the {half} {path}: {exc.strerror or exc}") from None


def _private_from_pem(pem: bytes, origin: str) -> SigningKey:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError):
        raise ConfigError(f"the signing key of {origin} is not an unencrypted PEM private key "
                          "(buildkit keys generate writes one)") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise ConfigError(f"the signing key of {origin} is not an ECDSA P-256 key (buildkit keys generate "
                          "writes one)")
    return SigningKey(key, origin)


def load_signing_key(path: Path | None, env: Mapping[str, str] | None = None) -> SigningKey | None:
    """The configured signing key: the file named (sign.key_file), else LLAMA_BUILDKIT_SIGN_KEY (withheld from
    the environment by withhold_key_env), else None. A file others may read is said in the key's warning."""
    if env is None:
        env = {**_WITHHELD, **os.environ}
    if path is not None:
        key = _private_from_pem(_read(path, "signing key"), str(path))
        return replace(key, warning=_exposure(path))
    text = env.get(KEY_ENV, "")
    if text.strip():
        return _private_from_pem(text.encode(), KEY_ENV)
    return None


def _exposure(path: Path) -> str:
    """The warning for a private key file that its group or others may read (or write): "" when only its
    owner can."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return ""
    if not mode & 0o077:
        return ""
    return (f"the signing key {path} can be read by others (mode {mode:04o}); make it its owner's alone: "
            f"chmod 600 {path}")


_WITHHELD: dict[str, str] = {}  # LLAMA_BUILDKIT_SIGN_KEY, once withhold_key_env took it out of os.environ


def withhold_key_env(environ: MutableMapping[str, str] | None = None) -> None:
    """Take LLAMA_BUILDKIT_SIGN_KEY (the private key's PEM) out of this process's environment, keeping it for
    load_signing_key: no process buildkit starts (git, docker, buildx, a credential helper, the build
    itself) inherits it. The CLI calls it before any command runs."""
    environ = os.environ if environ is None else environ
    text = environ.pop(KEY_ENV, None)
    _WITHHELD.clear()  # this run's environment only (a test runs the CLI many times in one process)
    if text is not None:
        _WITHHELD[KEY_ENV] = text


def load_public_key(path: Path) -> ec.EllipticCurvePublicKey:
    pem = _read(path, "public key")
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError):
        raise ConfigError(f"{path} is not a PEM public key") from None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise ConfigError(f"{path} is not an ECDSA public key")
    return key


def verifies(key: ec.EllipticCurvePublicKey, signature: bytes, data: bytes) -> bool:
    try:
        key.verify(signature, data, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True


def _read(path: Path, what: str) -> bytes:
    try:
        return read_regular(path, KEY_LIMIT)
    except OSError as exc:
        raise ConfigError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None
