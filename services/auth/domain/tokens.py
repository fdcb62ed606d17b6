"""Bearer tokens: made, parsed and checked without IO (the caller passes randomness and time).

A built-in token is `mst_<principal>_<token id>_<secret>`: the principal is readable so that any
client knows its own subjects and inbox; the secret is 32 random bytes in hex. The log keeps only
a random salt and SHA-256(salt + secret) (docs/decisions/0009: a slow KDF gains nothing against a
256-bit random secret and would be paid on every connection and HTTP request).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass

from contracts.identity import valid_principal_id

PREFIX = "mst"
MAX_TOKEN_CHARS = 4096
"""Longer than any token we issue or any sane identity-provider JWT: refused unread."""

TOKEN_ID = re.compile(r"^[0-9a-f]{12}$")
SECRET = re.compile(r"^[0-9a-f]{64}$")
JWT_SHAPE = re.compile(r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$")


class TokenError(ValueError):
    """A token refused before any lookup; the message is the reason (never the token)."""


@dataclass(frozen=True)
class ParsedToken:
    principal: str
    token_id: str
    secret: str


def digest(salt_hex: str, secret: str) -> str:
    return hashlib.sha256(bytes.fromhex(salt_hex) + secret.encode()).hexdigest()


def make_token(principal: str, token_id_bytes: bytes, secret_bytes: bytes, salt_bytes: bytes) -> tuple[str, str, str, str]:
    """(token, token id, salt hex, digest hex) from 6 + 32 + 16 random bytes."""
    if not valid_principal_id(principal):
        raise TokenError(f"principal id {principal!r} is not valid")
    if len(token_id_bytes) != 6 or len(secret_bytes) != 32 or len(salt_bytes) != 16:
        raise ValueError("make_token needs 6, 32 and 16 random bytes")
    token_id, secret, salt = token_id_bytes.hex(), secret_bytes.hex(), salt_bytes.hex()
    return f"{PREFIX}_{principal}_{token_id}_{secret}", token_id, salt, digest(salt, secret)


def check_size(token: object) -> str:
    if not isinstance(token, str) or not token:
        raise TokenError("no token given")
    if len(token) > MAX_TOKEN_CHARS:
        raise TokenError(f"token too long ({len(token)} characters; at most {MAX_TOKEN_CHARS})")
    if not token.isascii() or not token.isprintable() or any(c.isspace() for c in token):
        raise TokenError("token has characters a token never has (spaces, control or non-ASCII characters)")
    return token


def is_builtin(token: str) -> bool:
    return token.startswith(PREFIX + "_")


def looks_like_jwt(token: str) -> bool:
    return JWT_SHAPE.fullmatch(token) is not None


def parse(token: object) -> ParsedToken:
    """A built-in token's parts, or TokenError saying what is wrong with it."""
    text = check_size(token)
    parts = text.split("_")
    if len(parts) != 4 or parts[0] != PREFIX:
        raise TokenError("malformed token: expected mst_<principal>_<id>_<secret>")
    _, principal, token_id, secret = parts
    if not valid_principal_id(principal):
        raise TokenError("malformed token: the principal part is not a principal id")
    if not TOKEN_ID.fullmatch(token_id):
        raise TokenError("malformed token: the id part is not 12 hex digits")
    if not SECRET.fullmatch(secret):
        raise TokenError("malformed token: the secret part is not 64 hex digits")
    return ParsedToken(principal, token_id, secret)


def matches(parsed: ParsedToken, salt_hex: str, digest_hex: str) -> bool:
    return hmac.compare_digest(digest(salt_hex, parsed.secret), digest_hex)


def redact(token: object) -> str:
    """What may be logged about a token: its principal and id, never the secret."""
    if isinstance(token, str) and is_builtin(token):
        parts = token.split("_")
        if len(parts) == 4:
            return f"mst_{parts[1][:64]}_{parts[2][:12]}_…"
    return f"<{len(token) if isinstance(token, str) else 0}-character token>"
