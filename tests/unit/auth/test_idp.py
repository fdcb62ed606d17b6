"""The external backend: identity-provider JWTs checked against the provider's public key."""

from __future__ import annotations

import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from contracts.identity import TokenRevoked
from contracts.tokens import principal_of_token, unverified_principal
from services.auth.backends import AuthError
from services.auth.backends.idp import IdpBackend, IdpConfig, token_id_of
from services.auth.domain.state import IdentityState
from services.auth.domain.tokens import TokenError

KEY = Ed25519PrivateKey.generate()
OTHER = Ed25519PrivateKey.generate()
PUBLIC = KEY.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def idp_token(key: Ed25519PrivateKey = KEY, **claims: Any) -> str:
    body = {"sub": "zoe", "muster_tenant": "a", "muster_role": "user", "iss": "https://idp.example",
            "exp": int(time.time()) + 300, "jti": "j-1", **claims}
    return jwt.encode({k: v for k, v in body.items() if v is not None}, key, algorithm="EdDSA")


@pytest.fixture
def backend(state: IdentityState) -> IdpBackend:
    return IdpBackend(IdpConfig(public_key=PUBLIC, issuer="https://idp.example"), state)


def test_a_valid_token_names_its_principal_tenant_and_role(backend: IdpBackend) -> None:
    token = idp_token()
    assert backend.accepts(token)
    auth = backend.authenticate(token, time.time())
    assert (auth.principal.id, auth.principal.tenant, auth.principal.role, auth.token_id) == ("zoe", "a", "user", "jwt-j-1")
    assert principal_of_token(token) == unverified_principal(token) == "zoe"


@pytest.mark.parametrize("claims, key, reason", [
    ({}, OTHER, "not valid: Signature verification failed"),
    ({"exp": int(time.time()) - 3600}, KEY, "has expired"),
    ({"exp": None}, KEY, 'not valid: Token is missing the "exp" claim'),
    ({"iss": "https://evil.example"}, KEY, "not valid: Invalid issuer"),
    ({"sub": "Not Valid"}, KEY, "not a principal id"),
    ({"sub": "anonymous"}, KEY, "not a principal id"),  # reserved: on an open bus the body names the requester
    ({"muster_role": "god"}, KEY, "is not one of"),
    ({"muster_tenant": "zz"}, KEY, "does not exist"),
    ({"muster_tenant": None}, KEY, "does not name a tenant"),
    ({"sub": "alice", "muster_tenant": "b"}, KEY, "the log has alice"),  # a token of one tenant naming another
])
def test_bad_tokens_are_refused_with_a_reason(backend: IdpBackend, claims: dict[str, Any], key: Ed25519PrivateKey, reason: str) -> None:
    token = idp_token(key, **claims)
    with pytest.raises(AuthError) as err:
        backend.authenticate(token, time.time())
    assert reason in str(err.value) and token not in str(err.value)


def test_revoked_and_disabled(backend: IdpBackend, state: IdentityState) -> None:
    token = idp_token()
    state.apply(TokenRevoked(token_id=token_id_of(token, {"jti": "j-1"}), principal="zoe", by="ada"), 99)
    with pytest.raises(AuthError, match="revoked"):
        backend.authenticate(token, time.time())


def test_a_super_admin_needs_no_tenant(backend: IdpBackend) -> None:
    auth = backend.authenticate(idp_token(sub="sam", muster_role="super_admin", muster_tenant=None, jti=None), time.time())
    assert auth.principal.is_super_admin and auth.token_id.startswith("jwt-") and len(auth.token_id) == 16


def test_unverified_principal_of_garbage() -> None:
    with pytest.raises(TokenError):
        unverified_principal("a.b.c")
    with pytest.raises(TokenError):
        principal_of_token("neither")
