"""What the identity commands tell a user to do next: `whoami` of a refused token sent the user
to run `whoami` (the command they had just run), and `tenant create` printed a `<provisioner>`
placeholder where `muster up`'s provisioner is `provisioner`."""

from __future__ import annotations

from muster.auth_cli import _refused_whoami, tenant_next_steps


def test_whoami_of_a_refused_token_says_why_and_how_to_get_a_new_one() -> None:
    said = _refused_whoami("$MUSTER_TOKEN", "the tracker says: token abc of alice was revoked")
    assert said.startswith("the bus refused the token from $MUSTER_TOKEN; the tracker says: token abc of alice was revoked")
    assert "muster token create --for PRINCIPAL --save FILE" in said and "muster whoami" not in said
    down = _refused_whoami("$MUSTER_TOKEN", "the tracker accepts the token: the auth service is probably down")
    assert "token create" not in down


def test_tenant_create_prints_the_real_grant_of_each_provisioner() -> None:
    """`muster up`'s provisioner is `provisioner`: the next step is that command, not `<provisioner>`."""
    said = tenant_next_steps("acme", ["provisioner", "provisioner-2"])
    assert said.splitlines()[1:] == ["  muster grant provisioner execute --tenant acme --scope queue:default",
                                     "  muster grant provisioner-2 execute --tenant acme --scope queue:default"]
    assert "<provisioner>" not in said and "PROVISIONER" in tenant_next_steps("acme", [])
