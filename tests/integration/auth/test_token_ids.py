"""A token id of another tenant's is one nobody has: `token revoke <id>` by another tenant's
administrator was refused naming the token's owner ("eve cannot administer alice"), so a token
id (they name connections: `MUSTER/user:<principal>:<token id>`) told whose it was and that it
existed."""

from __future__ import annotations

from .conftest import Authed


async def test_another_tenants_token_id_is_answered_as_one_nobody_has(authed: Authed) -> None:
    root = await authed.raw(authed.admin_token, "root")
    try:
        alice = await authed.ask(root, "root", "user-create", principal="alice", tenant="a")
        eve = await authed.ask(root, "root", "user-create", principal="eve", tenant="b", role="tenant_admin")
    finally:
        await root.close()
    conn = await authed.raw(eve["data"]["token"], "eve")
    try:
        theirs = await authed.ask(conn, "eve", "token-revoke", token_id=alice["data"]["token_id"])
        nobodys = await authed.ask(conn, "eve", "token-revoke", token_id="ffffffffffff")
    finally:
        await conn.close()
    assert not theirs["ok"] and "alice" not in theirs["reason"], theirs
    assert theirs["reason"] == nobodys["reason"].replace("ffffffffffff", alice["data"]["token_id"]), (theirs, nobodys)
