"""The server lets in only good tokens, and each only where its principal may go."""

from __future__ import annotations

import nats.errors
import pytest

from .conftest import Authed


async def test_no_token_and_bad_tokens_are_refused(authed: Authed) -> None:
    for token in (None, "nonsense", "mst_root_0123456789ab_" + "0" * 64, "x" * 3000):
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await authed.raw(token)
    # Longer than the protocol's control line: the server itself refuses it.
    with pytest.raises(nats.errors.Error, match="maximum control line exceeded"):
        await authed.raw("x" * 5000)


async def test_a_super_admin_makes_a_tenant_user_who_is_confined(authed: Authed) -> None:
    root = await authed.raw(authed.admin_token, "root")
    made = await authed.ask(root, "root", "user-create", principal="alice", tenant="a")
    assert made["ok"], made
    alice = await authed.raw(made["data"]["token"], "alice")
    who = await authed.ask(alice, "alice", "whoami")
    assert who["data"]["tenant"] == "a" and who["data"]["role"] == "user"
    assert who["data"]["bus"]["subscribe"] == ["_INBOX.alice.>", "muster.cb.a.>"]
    await root.close()
    await alice.close()
