"""What the identity commands tell a user to do next: `whoami` of a refused token sent the user
to run `whoami` (the command they had just run), and `tenant create` printed a `<provisioner>`
placeholder where `muster up`'s provisioner is `provisioner`."""

from __future__ import annotations

import pytest

from muster.auth_cli import tenant_next_steps
from muster.cli_bus import refused_token as _refused_whoami
from muster.cli_support import CliError, new_token
from muster.tracker_client import TrackerReads


def test_whoami_of_a_refused_token_says_why_and_how_to_get_a_new_one() -> None:
    said = _refused_whoami("$MUSTER_TOKEN", "the tracker says: token abc of alice was revoked", "alice")
    assert said.startswith("the bus refused the token from $MUSTER_TOKEN; the tracker says: token abc of alice was revoked")
    # the principal the token names (walk of session 24: `--for PRINCIPAL`, to a user who is alice)
    assert "muster token create --for alice --save FILE" in said and "muster whoami" not in said
    assert "--for PRINCIPAL" in _refused_whoami("$MUSTER_TOKEN", "the tracker says: malformed token", "anonymous")
    down = _refused_whoami("$MUSTER_TOKEN", "the tracker accepts the token: the auth service is probably down", "alice")
    assert "token create" not in down


def test_tenant_create_prints_the_real_grant_of_each_provisioner() -> None:
    """`muster up`'s provisioner is `provisioner`: the next step is that command, not `<provisioner>`."""
    said = tenant_next_steps("acme", ["provisioner", "provisioner-2"])
    assert said.splitlines()[1:] == ["  muster grant provisioner execute --tenant acme --scope queue:default",
                                     "  muster grant provisioner-2 execute --tenant acme --scope queue:default"]
    assert "<provisioner>" not in said and "PROVISIONER" in tenant_next_steps("acme", [])


async def _refused_read(source: str, principal: str, message: str) -> CliError:
    """What a command's read says when the tracker answers 401 with `message`, the token in use
    having come from `source` ("none": no token found)."""

    class Refused:
        status = 401

        async def json(self) -> dict[str, object]:
            return {"error": {"status": 401, "message": message}}

    reads = object.__new__(TrackerReads)
    reads._source, reads._principal = source, principal
    with pytest.raises(CliError) as raised:
        await reads._check(Refused())  # type: ignore[arg-type]
    return raised.value


async def test_a_read_the_tracker_refuses_for_its_token_says_the_way_on_as_whoami_does() -> None:
    """`muster cluster list` with a revoked token said only that the tracker refused it; `whoami`
    said how to get a new one."""
    refused = await _refused_read("alice.cred", "alice", "token abc of alice was revoked")
    assert str(refused) == f"the tracker refused the token from alice.cred: token abc of alice was revoked\n{new_token('alice')}"
    assert "`muster token create --for alice --save FILE`" in new_token("alice")


async def test_a_disabled_principal_is_not_sent_for_a_new_token_it_cannot_have() -> None:
    """Walk of session 33: after `muster user disable alice` (for good: docs/security.md) her
    commands said "a new token: an admin of your tenant runs `muster token create --for alice`",
    which the auth service refuses (`alice is disabled`)."""
    refused = await _refused_read("alice.cred", "alice", "alice is disabled")
    said = str(refused)
    assert said.startswith("the tracker refused the token from alice.cred: alice is disabled\n"), said
    assert "token create" not in said and "muster user create NEW-ID --save FILE" in said and refused.exit_code == 4
    bus = _refused_whoami("alice.cred", "the tracker says: alice is disabled", "alice")
    assert "token create" not in bus and "muster user create NEW-ID --save FILE" in bus
    # another principal's word in a reason is not hers: bob's refusal still gets the way to a token
    assert "token create --for bob" in _refused_whoami("b.cred", "the tracker says: token x of bob was revoked", "bob")


async def test_a_read_without_any_token_says_where_it_looked_not_to_ask_an_admin() -> None:
    """Walk of session 27: `muster cluster list` from a folder without `.muster` said "the tracker
    refused the token from none" and sent the newcomer to an admin for a new token, while the
    one `muster up` made was in the folder they had just left."""
    refused = await _refused_read("none", "anonymous", "this route needs a token")
    said = str(refused)
    assert said.startswith("the tracker refused a client without a token: none in $MUSTER_TOKEN, $MUSTER_CREDENTIALS,"), said
    assert "MUSTER_DATA_DIR" in said and "the folder `muster up` runs in" in said
    assert "from none" not in said and "an admin" not in said
    assert refused.exit_code == 4


@pytest.mark.parametrize("args", [["cluster", "list", "--tracker-url", "http://127.0.0.1:9"],  # a read (the tracker)
                                  ["cluster", "delete", "c1", "--nats-url", "nats://127.0.0.1:9"],  # a request (the bus)
                                  ["token", "list", "--nats-url", "nats://127.0.0.1:9"]])  # an identity request
def test_a_token_that_is_no_token_is_refused_as_an_unknown_one_is(args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A token cut short when pasted was bad input (exit 2) and said nothing more, where a
    well-formed unknown one is refused (exit 4, docs/client.md) with the way to a new token."""
    from click.testing import CliRunner

    from muster.cli import main

    monkeypatch.setenv("MUSTER_TOKEN", "mst_alice_0123456789ab_" + "f" * 40)
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 4, result.output
    assert "the token from $MUSTER_TOKEN is unusable: malformed token: the secret part is not 64 hex digits" in result.output
    assert "muster token create --for PRINCIPAL --save FILE" in result.output
    assert "f" * 40 not in result.output  # (the token is not shown back)
