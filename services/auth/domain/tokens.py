"""Bearer tokens: made and checked without IO (the caller passes randomness and time); their
format and parsing are `contracts.tokens`.

A built-in token is `mst_<principal>_<token id>_<secret>`; the secret is 32 random bytes in hex. The log keeps only
a random salt and SHA-256(salt + secret) (docs/decisions/0009: a slow KDF gains nothing against a
256-bit random secret and would be paid on every connection and HTTP request).
"""

from __future__ import annotations

import hashlib
import hmac

from contracts.identity import valid_principal_id
from contracts.tokens import PREFIX, ParsedToken, TokenError, check_size, is_builtin, looks_like_jwt, parse

__all__ = ["ParsedToken", "TokenError", "check_size", "digest", "is_builtin", "looks_like_jwt", "make_token", "matches",
           "parse", "redact"]


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


def matches(parsed: ParsedToken, salt_hex: str, digest_hex: str) -> bool:
    return hmac.compare_digest(digest(salt_hex, parsed.secret), digest_hex)


def redact(token: object) -> str:
    """What may be logged about a token: its principal and id, never the secret."""
    if isinstance(token, str) and is_builtin(token):
        parts = token.split("_")
        if len(parts) == 4:
            return f"mst_{parts[1][:64]}_{parts[2][:12]}_…"
    return f"<{len(token) if isinstance(token, str) else 0}-character token>"
