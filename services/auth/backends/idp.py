"""External identities: JWTs issued by an identity provider, checked with `pyjwt` against the
provider's public key (docs/security.md, "Another identity backend").

The provider is trusted to say who the bearer is (`principal_claim`), its tenant
(`tenant_claim`) and its role (`role_claim`: user, tenant_admin or super_admin); grants come
from the log like any principal's, and a principal disabled in the log stays disabled. Revoking
such a token names `jwt-<jti>` (or `jwt-<first 12 hex of its SHA-256>` when it has no `jti`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt

from contracts.identity import RESERVED_PRINCIPALS, tenant_name_problem, valid_principal_id

from ..domain.state import IdentityState, Principal
from ..domain.tokens import TokenError, check_size, looks_like_jwt
from .base import Authenticated, AuthError

ROLES = ("user", "tenant_admin", "super_admin")


@dataclass(frozen=True)
class IdpConfig:
    public_key: str
    """PEM of the provider's signing key (RSA, EC or Ed25519)"""
    algorithms: tuple[str, ...] = ("RS256", "ES256", "EdDSA")
    issuer: str | None = None
    audience: str | None = None
    principal_claim: str = "sub"
    tenant_claim: str = "muster_tenant"
    role_claim: str = "muster_role"
    leeway_s: float = 30.0
    required: tuple[str, ...] = field(default=("exp",))

    @classmethod
    def from_file(cls, path: Path) -> IdpConfig:
        """JSON: {"public_key_file": ..., "issuer": ..., "audience": ..., ...}."""
        data = json.loads(path.read_text())
        key_file = Path(data.pop("public_key_file"))
        if not key_file.is_absolute():
            key_file = path.parent / key_file
        for name in ("algorithms", "required"):
            if name in data:
                data[name] = tuple(data[name])
        return cls(public_key=key_file.read_text(), **data)


def token_id_of(token: str, claims: dict[str, Any]) -> str:
    jti = claims.get("jti")
    if isinstance(jti, str) and jti and len(jti) <= 64 and jti.replace("-", "").isalnum():
        return f"jwt-{jti}"
    return "jwt-" + hashlib.sha256(token.encode()).hexdigest()[:12]


class IdpBackend:
    name = "idp"

    def __init__(self, config: IdpConfig, state: IdentityState) -> None:
        self.config = config
        self.state = state

    def accepts(self, token: str) -> bool:
        return looks_like_jwt(token)

    def authenticate(self, token: str, now: float) -> Authenticated:
        c = self.config
        try:
            check_size(token)
            claims = jwt.decode(
                token, c.public_key, algorithms=list(c.algorithms), issuer=c.issuer, audience=c.audience,
                leeway=c.leeway_s, options={"require": list(c.required), "verify_aud": c.audience is not None},
            )
        except TokenError as err:
            raise AuthError(str(err)) from None
        except jwt.ExpiredSignatureError:
            raise AuthError("the identity provider's token has expired") from None
        except jwt.InvalidTokenError as err:
            raise AuthError(f"the identity provider's token is not valid: {err}") from None
        principal_id = claims.get(c.principal_claim)
        if not isinstance(principal_id, str) or not valid_principal_id(principal_id) or principal_id in RESERVED_PRINCIPALS:
            raise AuthError(f"the token's {c.principal_claim!r} claim is not a principal id")
        role = claims.get(c.role_claim, "user")
        if role not in ROLES:
            raise AuthError(f"the token's {c.role_claim!r} claim {role!r} is not one of {', '.join(ROLES)}")
        tenant = claims.get(c.tenant_claim)
        if role != "super_admin":
            if not isinstance(tenant, str) or tenant_name_problem(tenant):
                raise AuthError(f"the token's {c.tenant_claim!r} claim does not name a tenant")
            if tenant not in self.state.tenants:
                raise AuthError(f"the token names tenant {tenant}, which does not exist")
        else:
            tenant = None
        known = self.state.principals.get(principal_id)
        if known is not None:
            if known.disabled:
                raise AuthError(f"{principal_id} is disabled")
            if known.tenant != tenant or known.role != role:
                raise AuthError(f"the token says {principal_id} is {role} of {tenant}, but the log has {known.describe()}")
        token_id = token_id_of(token, claims)
        if token_id in self.state.revoked_external:
            raise AuthError(f"token {token_id} of {principal_id} was revoked")
        exp = claims.get("exp")
        return Authenticated(Principal(principal_id, role, tenant), token_id, float(exp) if exp is not None else None, self.name)
