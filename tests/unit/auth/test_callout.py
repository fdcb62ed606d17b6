"""The callout's answer: a signed response with the principal's permissions, or a refusal with
a reason; requests not signed by a server are ignored."""

from __future__ import annotations

import os
from typing import Any

import nkeys
import pytest

from contracts.identity import AuthRequest
from services.auth.backends.builtin import BuiltinBackend
from services.auth.callout import answer
from services.auth.domain.admin import Admin
from services.auth.domain.state import IdentityState
from services.auth.natsjwt import Signer, decode_verified, new_account_seed

from .conftest import rand

NOW = 2_000_000.0
ISSUER = Signer(new_account_seed())
SERVER = Signer(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_SERVER).decode(), kind="N")
USER_NKEY = nkeys.from_seed(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)).public_key.decode()


def request(token: str | None, signer: Signer = SERVER) -> bytes:
    opts: dict[str, Any] = {"lang": "python3"}
    if token is not None:
        opts["auth_token"] = token
    claims = {"sub": ISSUER.public_key, "aud": "nats-authorization-request",
              "nats": {"server_id": {"id": "NSERVER1", "name": "n"}, "user_nkey": USER_NKEY,
                       "client_info": {"id": 7, "host": "127.0.0.1"}, "connect_opts": opts,
                       "type": "authorization_request", "version": 2}}
    return signer.encode(claims, int(NOW)).encode()


def token_for(state: IdentityState, who: str, **fields: Any) -> str:
    result = Admin(state, rand, NOW).handle(who, "token-create", AuthRequest(**fields))
    for _, event, _ in result.appends:
        state.apply(event, state.last_seq + 1)
    return str(result.reply.data["token"])


def test_a_good_token_gets_a_user_jwt_with_its_permissions(state: IdentityState) -> None:
    token = token_for(state, "alice", expires_in_s=600)
    outcome = answer(request(token), [BuiltinBackend(state)], state, ISSUER, NOW)
    assert outcome.authenticated and outcome.authenticated.principal.id == "alice"
    assert (outcome.server_id, outcome.client_id) == ("NSERVER1", 7)
    response = decode_verified(outcome.response or "", issuer_prefix="A")
    assert response["iss"] == ISSUER.public_key and response["aud"] == "NSERVER1" and response["sub"] == USER_NKEY
    user = decode_verified(response["nats"]["jwt"], issuer_prefix="A")
    assert user["aud"] == "MUSTER" and user["sub"] == USER_NKEY and user["exp"] == int(NOW + 600)
    assert user["name"] == f"alice:{outcome.authenticated.token_id}"
    assert user["nats"]["pub"]["allow"] == ["muster.ops.a.alice.*", "muster.q.a.alice.>", "muster.auth.alice.*",
                                               "muster.gov.a.alice.*"]
    assert user["nats"]["sub"]["allow"] == ["_INBOX.alice.>", "muster.cb.a.>"]
    assert "resp" not in user["nats"]
    assert token not in outcome.response  # type: ignore[operator]


def test_a_token_in_its_last_fraction_of_a_second_is_refused_not_given_a_jwt_already_expired(state: IdentityState) -> None:
    # Issued at a fractional time, it ends at NOW + 600.5; the user JWT's exp would be NOW + 600,
    # already past at NOW + 600.2, and the server would drop the connection as expired.
    result = Admin(state, rand, NOW + 0.5).handle("alice", "token-create", AuthRequest(expires_in_s=600))
    for _, event, _ in result.appends:
        state.apply(event, state.last_seq + 1)
    token = str(result.reply.data["token"])
    before = answer(request(token), [BuiltinBackend(state)], state, ISSUER, NOW + 599.9)
    assert before.authenticated is not None
    assert decode_verified(decode_verified(before.response or "", issuer_prefix="A")["nats"]["jwt"], issuer_prefix="A")["exp"] == int(NOW + 600)
    last = answer(request(token), [BuiltinBackend(state)], state, ISSUER, NOW + 600.2)
    assert last.authenticated is None and "has expired" in last.reason
    assert "has expired" in decode_verified(last.response or "", issuer_prefix="A")["nats"]["error"]


@pytest.mark.parametrize("token, reason", [
    (None, "no token"),
    ("x" * 5000, "too long"),
    ("hello", "malformed"),
    ("mst_alice_0123456789ab_" + "0" * 64, "unknown token"),
])
def test_bad_tokens_get_a_signed_refusal_with_a_reason(state: IdentityState, token: str | None, reason: str) -> None:
    outcome = answer(request(token), [BuiltinBackend(state)], state, ISSUER, NOW)
    assert outcome.authenticated is None and reason in outcome.reason
    response = decode_verified(outcome.response or "", issuer_prefix="A")
    assert reason in response["nats"]["error"] and "jwt" not in response["nats"]
    if token:
        assert token not in outcome.reason and token not in (outcome.response or "")


def test_requests_not_signed_by_a_server_are_ignored(state: IdentityState) -> None:
    forged = request(token_for(state, "alice"), signer=ISSUER)  # an account key, not a server's
    assert answer(forged, [BuiltinBackend(state)], state, ISSUER, NOW).response is None
    assert answer(b"garbage", [BuiltinBackend(state)], state, ISSUER, NOW).response is None
    good = request(token_for(state, "alice")).decode()
    head, body, sig = good.split(".")
    tampered = f"{head}.{body[:-4]}AAAA.{sig}".encode()
    assert answer(tampered, [BuiltinBackend(state)], state, ISSUER, NOW).response is None


def test_services_may_answer_requests_on_inboxes_only_and_provisioners_only_name_themselves(state: IdentityState) -> None:
    token = token_for(state, "root", principal="p1")
    outcome = answer(request(token), [BuiltinBackend(state)], state, ISSUER, NOW)
    user = decode_verified(decode_verified(outcome.response or "", "A")["nats"]["jwt"], "A")
    # No `allow_responses` (an answer on whatever reply subject a request names): inboxes only.
    assert "resp" not in user["nats"] and "exp" not in user
    pub = user["nats"]["pub"]["allow"]
    assert "_INBOX.>" in pub
    assert "muster.evt.a.task.*.*.p1" in pub and "$JS.API.CONSUMER.MSG.NEXT.TASKS.workers-a-default" in pub
    assert not any(s.startswith("muster.evt.b.") or s.startswith("muster.task.") for s in pub)
    assert not any("DELETE" in s and "CONSUMER" not in s or "PURGE" in s for s in pub)
    assert user["nats"]["sub"]["allow"] == ["muster.q.provisioner.p1.drain", "muster.q.provisioner.p1.held", "_INBOX.p1.>"]


def test_every_role_gets_bus_permissions_built(state: IdentityState) -> None:
    from services.auth.domain.buspermissions import bus_permissions

    for principal in state.principals.values():
        perms = bus_permissions(principal, state.grants_of(principal.id))
        assert f"_INBOX.{principal.id}.>" in perms.sub
        assert all(" " not in s and s for s in perms.pub + perms.sub)
