"""A request the bus refuses is said with the tenant as the command had it: nats-py lower-cases
the server's whole `-ERR` line (walk 9), so a request in tenant `Acme` (tenant names may have
capitals; principal ids may not) was said to be refused "in tenant acme", which has no such
tenant."""

from __future__ import annotations

import nats.errors

from muster.cli_bus import Refusals


async def refused(lowered: str) -> Refusals:
    """What nats-py hands the error callback for the server's `-ERR 'Permissions Violation for
    Publish to "muster.ops.Acme.bob.create"'` (nats/protocol/parser.py lower-cases the line)."""
    refusals = Refusals()
    await refusals.on_error(nats.errors.Error(lowered))
    return refusals


async def test_the_tenant_is_said_as_the_command_had_it() -> None:
    said = (await refused('nats: permissions violation for publish to "muster.ops.acme.bob.create"')).describe("bob", "Acme")
    assert said.startswith("refused: bob may not send create requests in tenant Acme: "), said


async def test_another_subject_gets_its_tenant_back_too() -> None:
    refusals = await refused('nats: permissions violation for subscription to "muster.evt.acme.cluster.x"')
    assert refusals.describe("bob", "Acme") == "refused: the bus does not let bob subscribe to muster.evt.Acme.cluster.x"


async def test_a_jetstream_subject_is_said_as_the_server_has_it() -> None:
    """`muster planners` run with a tenant's token was refused "to publish to
    $js.api.stream.info.kv_leases": a subject no one would find, in no document."""
    refusals = await refused('nats: permissions violation for publish to "$js.api.stream.info.kv_leases"')
    assert refusals.describe("bob", "acme") == "refused: the bus does not let bob publish to $JS.API.STREAM.INFO.KV_leases"
    refusals = await refused('nats: permissions violation for publish to "$js.api.consumer.create.events.get-1.muster.evt.acme.>"')
    assert refusals.describe("bob", "acme") == ("refused: the bus does not let bob publish to "  # (after the stream, as it is)
                                                "$JS.API.CONSUMER.CREATE.EVENTS.get-1.muster.evt.acme.>")
    refusals = await refused('nats: permissions violation for publish to "$kv.leases.shard-1"')
    assert refusals.describe("bob", "acme") == "refused: the bus does not let bob publish to $KV.leases.shard-1"
