"""The few NATS JWTs the auth callout needs, signed with an account nkey (`nkeys`, Ed25519).

A NATS JWT is `base64url(header).base64url(claims).base64url(ed25519 signature)` with header
`{"typ":"JWT","alg":"ed25519-nkey"}`; `iss` is the signer's public nkey and `jti` a digest of the
claims. `nats-jwt` on PyPI does not implement authorization requests and responses
(docs/decisions/0009), so the encoding lives here.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from typing import Any

import nacl.exceptions
import nacl.signing
import nkeys

HEADER = {"typ": "JWT", "alg": "ed25519-nkey"}


class JwtError(ValueError):
    pass


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def new_account_seed() -> str:
    """A fresh account nkey seed (`SA...`): the callout issuer's signing key."""
    return nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_ACCOUNT).decode()


class Signer:
    def __init__(self, seed: str, kind: str = "A") -> None:
        try:
            self._kp = nkeys.from_seed(seed.strip().encode())
        except Exception:  # noqa: BLE001 - nkeys raises its own types; the reason is the seed
            raise JwtError("the issuer seed is not an nkey seed") from None
        self.public_key = self._kp.public_key.decode()
        if not self.public_key.startswith(kind):
            raise JwtError(f"the issuer seed is not of kind {kind} (S{kind}...)")

    def encode(self, claims: dict[str, Any], now: int) -> str:
        body = dict(claims, iat=now, iss=self.public_key, jti="")
        body["jti"] = base64.b32encode(hashlib.sha256(_canonical(body)).digest()).decode().rstrip("=")
        signing_input = f"{_b64(_canonical(HEADER))}.{_b64(_canonical(body))}"
        return f"{signing_input}.{_b64(self._kp.sign(signing_input.encode()))}"


def _canonical(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _verify_key(public_key: str) -> nacl.signing.VerifyKey:
    try:
        raw = base64.b32decode(public_key + "=" * (-len(public_key) % 8))
    except (binascii.Error, ValueError):
        raise JwtError("issuer is not an nkey") from None
    if len(raw) != 35:
        raise JwtError("issuer is not an nkey")
    return nacl.signing.VerifyKey(raw[1:33])


def decode_verified(token: str, issuer_prefix: str = "N") -> dict[str, Any]:
    """Claims of a JWT whose signature matches its own `iss` (a server key `N...` for
    authorization requests); JwtError otherwise."""
    try:
        head, body, sig = token.split(".")
        claims = json.loads(_unb64(body))
        issuer = claims["iss"]
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise JwtError("not a NATS JWT") from None
    if not isinstance(issuer, str) or not issuer.startswith(issuer_prefix):
        raise JwtError(f"issued by {str(issuer)[:8]}..., not by a key of kind {issuer_prefix}")
    try:
        _verify_key(issuer).verify(f"{head}.{body}".encode(), _unb64(sig))
    except (nacl.exceptions.BadSignatureError, binascii.Error, ValueError):
        raise JwtError("bad signature") from None
    return claims
