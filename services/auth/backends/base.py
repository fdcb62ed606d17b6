"""The identity backends' one interface: who a bearer token is (`IdentityBackend`), and the
answer (`Authenticated`) or the refusal (`AuthError`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..domain.state import Principal


class AuthError(Exception):
    """A token refused; the message is a reason a person understands, and never the token."""


@dataclass(frozen=True)
class Authenticated:
    principal: Principal
    token_id: str
    """what revocation names: the built-in token's id, or `jwt-<digest prefix>`"""
    expires_at: float | None
    backend: str


class IdentityBackend(Protocol):
    name: str

    def accepts(self, token: str) -> bool:
        """Is this token of this backend's shape (cheap; no verification)?"""

    def authenticate(self, token: str, now: float) -> Authenticated:
        """Who the token is, or AuthError naming why not."""
