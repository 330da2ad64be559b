"""A signature of cosign's formats checked against a public key: a `.sig` layer's signature over its payload
(layer_verifies), a DSSE envelope's statement when one of its signatures is the key's (envelope_statement).
Both signing.py (the tag scheme) and referrersigning.py (the OCI 1.1 referrers) read signatures back with them."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from buildkit.release import cosignformat as cf
from buildkit.release.signkeys import verifies


def layer_verifies(key: ec.EllipticCurvePublicKey, layer: cf.Layer) -> bool:
    try:
        signature = base64.b64decode(dict(layer.annotations).get(cf.SIGNATURE_ANNOTATION, ""), validate=True)
    except (binascii.Error, ValueError):
        return False
    return verifies(key, signature, layer.body)


def envelope_statement(key: ec.EllipticCurvePublicKey, body: bytes) -> dict[str, Any] | None:
    """The statement of a DSSE envelope one of whose signatures key made; None otherwise."""
    try:
        env = json.loads(body)
        payload = base64.b64decode(env["payload"], validate=True)
        if env["payloadType"] != cf.IN_TOTO:
            return None
        for sig in env["signatures"]:
            if verifies(key, base64.b64decode(sig["sig"], validate=True), cf.pae(cf.IN_TOTO, payload)):
                statement = json.loads(payload)
                return statement if isinstance(statement, dict) else None
    except (ValueError, KeyError, TypeError, binascii.Error):
        return None
    return None
