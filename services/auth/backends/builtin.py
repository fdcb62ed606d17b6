"""The built-in backend: tokens muster issued, checked against the identity events' fold."""

from __future__ import annotations

from ..domain import tokens
from ..domain.state import IdentityState
from .base import Authenticated, AuthError


class BuiltinBackend:
    name = "builtin"

    def __init__(self, state: IdentityState) -> None:
        self.state = state

    def accepts(self, token: str) -> bool:
        return tokens.is_builtin(token)

    def authenticate(self, token: str, now: float) -> Authenticated:
        try:
            parsed = tokens.parse(token)
        except tokens.TokenError as err:
            raise AuthError(str(err)) from None
        record = self.state.tokens.get(parsed.token_id)
        if record is None or record.principal != parsed.principal or not tokens.matches(parsed, record.salt, record.digest):
            raise AuthError(f"unknown token {parsed.token_id} of {parsed.principal}")
        if record.revoked:
            raise AuthError(f"token {parsed.token_id} of {parsed.principal} was revoked")
        if record.expired(now):
            raise AuthError(f"token {parsed.token_id} of {parsed.principal} has expired")
        principal = self.state.principals.get(parsed.principal)
        if principal is None:
            raise AuthError(f"principal {parsed.principal} does not exist")
        if principal.disabled:
            raise AuthError(f"{parsed.principal} is disabled")
        return Authenticated(principal, record.token_id, record.expires_at, self.name)
