"""Identity backends: who a bearer token is. One small interface (`IdentityBackend`), two
implementations: the built-in one (tokens issued by muster, kept as salted hashes in the log)
and `idp` (JWTs of an identity provider, checked against its public key)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..domain.state import IdentityState, Principal


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


IDP_ENV = "MUSTER_IDP"
"""Path of an identity provider's JSON config (backends/idp.py); set, its JWTs are accepted too."""


def identity_backends(state: IdentityState, idp_file: str | None = None) -> list[IdentityBackend]:
    """The built-in backend, then the identity provider's when one is configured (`--idp` or
    `$MUSTER_IDP`). Another backend plugs in here (docs/security.md)."""
    import os
    from pathlib import Path

    from .builtin import BuiltinBackend
    from .idp import IdpBackend, IdpConfig

    backends: list[IdentityBackend] = [BuiltinBackend(state)]
    path = idp_file or os.environ.get(IDP_ENV)
    if path:
        backends.append(IdpBackend(IdpConfig.from_file(Path(path)), state))
    return backends
