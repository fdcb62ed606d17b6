"""The auth callout's answer to one connection: who the token is, and its bus permissions,
as a signed authorization response (docs/decisions/0009).

`answer` is IO-free: the caller passes the request's JWT, the backends, the time and the
signer; it returns the response JWT and what to log (never the token).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .backends import Authenticated, AuthError, IdentityBackend
from .domain.buspermissions import bus_permissions
from .domain.state import IdentityState
from .domain.tokens import TokenError, check_size
from .natsjwt import JwtError, Signer, decode_verified

ACCOUNT = "MUSTER"


@dataclass(frozen=True)
class Outcome:
    response: str | None
    """the signed authorization response, or None when the request itself was not the server's"""
    authenticated: Authenticated | None
    reason: str
    server_id: str = ""
    client_id: int = 0


def user_name(auth: Authenticated) -> str:
    """The connection's user name on the server (CONNZ shows it; revocation finds it)."""
    return f"{auth.principal.id}:{auth.token_id}"


def _response(signer: Signer, user_nkey: str, server_id: str, now: int, *, user_jwt: str | None = None,
              error: str | None = None) -> str:
    nats: dict[str, Any] = {"type": "authorization_response", "version": 2}
    if user_jwt is not None:
        nats["jwt"] = user_jwt
    if error is not None:
        nats["error"] = error
    return signer.encode({"sub": user_nkey, "aud": server_id, "nats": nats}, now)


def user_claims(auth: Authenticated, state: IdentityState, user_nkey: str, now: float) -> dict[str, Any]:
    perms = bus_permissions(auth.principal, state.grants_of(auth.principal.id))
    nats: dict[str, Any] = {
        "pub": {"allow": list(perms.pub)} if perms.pub else {"deny": [">"]},
        "sub": {"allow": list(perms.sub)} if perms.sub else {"deny": [">"]},
        "subs": -1, "data": -1, "payload": -1, "type": "user", "version": 2,
    }
    if perms.responses:
        nats["resp"] = {"max": 1, "ttl": 0}
    claims: dict[str, Any] = {"sub": user_nkey, "aud": ACCOUNT, "name": user_name(auth), "nats": nats}
    if auth.expires_at is not None:
        claims["exp"] = int(auth.expires_at)
    return claims


def answer(request_jwt: bytes, backends: Sequence[IdentityBackend], state: IdentityState, signer: Signer, now: float) -> Outcome:
    try:
        claims = decode_verified(request_jwt.decode("ascii", "replace"))
        nats = claims["nats"]
        user_nkey, server_id = nats["user_nkey"], nats["server_id"]["id"]
        client_id = int(nats.get("client_info", {}).get("id", 0))
        token = nats.get("connect_opts", {}).get("auth_token")
    except (JwtError, KeyError, TypeError, ValueError) as err:
        return Outcome(None, None, f"ignored a request that is not the server's: {err}")
    stamp = int(now)

    def refuse(reason: str) -> Outcome:
        return Outcome(_response(signer, user_nkey, server_id, stamp, error=reason), None, reason, server_id, client_id)

    if token is None:
        return refuse("no token: connect with a muster token (MUSTER_TOKEN)")
    try:
        check_size(token)
    except TokenError as err:
        return refuse(str(err))
    backend = next((b for b in backends if b.accepts(token)), None)
    if backend is None:
        return refuse("malformed token: neither a muster token (mst_...) nor a JWT")
    try:
        auth = backend.authenticate(token, now)
    except AuthError as err:
        return refuse(str(err))
    if auth.expires_at is not None and int(auth.expires_at) <= now:
        # In its last fraction of a second: the user JWT's `exp` counts whole seconds (cut
        # down), so it would be past already, and the server would drop the connection at once
        # as "User Authentication Expired" rather than refuse it (a reconnect within that
        # second after the server cut the token's connection off, session 37).
        return refuse(f"token {auth.token_id} of {auth.principal.id} has expired (its last second)")
    user_jwt = signer.encode(user_claims(auth, state, user_nkey, now), stamp)
    return Outcome(_response(signer, user_nkey, server_id, stamp, user_jwt=user_jwt), auth, "accepted", server_id, client_id)
