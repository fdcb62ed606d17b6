"""What a bearer token looks like, for everyone who holds one (no IO, no secret checked here).

A built-in token is `mst_<principal>_<token id>_<secret>`: the principal is readable so that any
client knows its own subjects and inbox. A token of an identity provider is a JWT, whose `sub`
claim a client reads without checking its signature (the server's auth service checks it).
Making and checking tokens is the auth service's (`services/auth/domain/tokens.py`).
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass

from .identity import valid_principal_id

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


def unverified_principal(token: str, claim: str = "sub") -> str:
    """What a client needs before connecting: its own principal, read from the JWT's payload
    without checking the signature (the server's auth service checks it)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        raise TokenError("malformed JWT: its payload is not base64url JSON") from None
    value = claims.get(claim) if isinstance(claims, dict) else None
    if not isinstance(value, str) or not valid_principal_id(value):
        raise TokenError(f"the JWT's {claim!r} claim is not a principal id (1-64 lowercase letters, digits or '-')")
    return value


def principal_of_token(token: str) -> str:
    """The principal a token names: `mst_<principal>_...` for built-in tokens, the `sub` claim
    (read, not verified: the server verifies) of an identity provider's JWT."""
    check_size(token)
    if is_builtin(token):
        return parse(token).principal
    if looks_like_jwt(token):
        return unverified_principal(token)
    raise TokenError("malformed token: neither a muster token (mst_...) nor a JWT")
