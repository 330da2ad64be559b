"""Signing keys (issue 38): an ECDSA P-256 key pair, as cosign's own `--key` files use.

The private key is a PKCS#8 PEM written with mode 0600 from its creation; buildkit reads it from a file
or from the variable LLAMA_BUILDKIT_SIGN_KEY (the PEM text itself), never from argv, and never says it
in a message, a label or a log. The public key is a PEM SubjectPublicKeyInfo, what `cosign verify --key`
takes. Signatures are ECDSA over SHA-256, DER-encoded, as cosign writes and verifies them.

Written with `cryptography` (pyca): the reference Python binding of OpenSSL for these primitives.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from buildkit.core.boundedread import read_regular
from buildkit.core.errors import ConfigError
from buildkit.core.wholefile import write_whole

KEY_ENV = "LLAMA_BUILDKIT_SIGN_KEY"  # the private key's PEM text (a CI secret)
KEY_LIMIT = 64 * 1024


@dataclass(frozen=True)
class SigningKey:
    """A private key and where it came from (a file's path or the variable's name: never its text)."""

    key: ec.EllipticCurvePrivateKey
    origin: str

    def sign(self, data: bytes) -> bytes:
        return self.key.sign(data, ec.ECDSA(hashes.SHA256()))

    def public_pem(self) -> bytes:
        return public_pem(self.key.public_key())


def public_pem(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def generate_keys(private_path: Path, public_path: Path) -> None:
    """Write a new key pair: the private key 0600, the public key beside it. An existing private key is
    not replaced (its signatures would no longer verify with anything published)."""
    if private_path.exists() or private_path.is_symlink():
        raise ConfigError(f"{private_path} exists: buildkit does not replace a signing key; remove it or "
                          "name another file")
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    try:
        write_whole(private_path, pem, private=True)
        write_whole(public_path, public_pem(key.public_key()))
    except OSError as exc:
        raise ConfigError(f"cannot write the key pair at {private_path}: {exc.strerror or exc}") from None


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
    """The configured signing key: the file named (sign.key_file), else LLAMA_BUILDKIT_SIGN_KEY, else None."""
    env = os.environ if env is None else env
    if path is not None:
        return _private_from_pem(_read(path, "signing key"), str(path))
    text = env.get(KEY_ENV, "")
    if text.strip():
        return _private_from_pem(text.encode(), KEY_ENV)
    return None


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
