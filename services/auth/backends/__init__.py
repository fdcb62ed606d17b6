"""Identity backends: who a bearer token is. One small interface (`IdentityBackend`), two
implementations: the built-in one (tokens issued by muster, kept as salted hashes in the log)
and `idp` (JWTs of an identity provider, checked against its public key)."""

from __future__ import annotations

from ..domain.state import IdentityState
from .base import Authenticated, AuthError, IdentityBackend

__all__ = ["IDP_ENV", "AuthError", "Authenticated", "IdentityBackend", "identity_backends"]


IDP_ENV = "MUSTER_IDP"
"""Path of an identity provider's JSON config (backends/idp.py); set, its JWTs are accepted too."""


def identity_backends(state: IdentityState, idp_file: str | None = None) -> list[IdentityBackend]:
    """The built-in backend, then the identity provider's when one is configured (`--idp` or
    `$MUSTER_IDP`). Another backend plugs in here (docs/security.md)."""
    import os
    from pathlib import Path

    from .builtin import BuiltinBackend
    from .idp import IdpBackend, IdpConfig  # (PyJWT, only where tokens are checked)

    backends: list[IdentityBackend] = [BuiltinBackend(state)]
    path = idp_file or os.environ.get(IDP_ENV)
    if path:
        backends.append(IdpBackend(IdpConfig.from_file(Path(path)), state))
    return backends
