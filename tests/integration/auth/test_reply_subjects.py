"""Attack: a tenant's raw client names the reply subject of its own requests. nats-server lets a
service that answers requests publish on that subject whatever it is (and the auth service's own
user may publish anywhere), so tenant b's admin, asking `whoami`, `list`, `notify-test`, `pause`
or `solve` in its own name with a subject of tenant a's log, of its task queue, of the planners'
leases or of its bus callbacks as the reply, had every service write its answer there (20
messages: five services, four places). Real services under their own identities now answer an
inbox only; a JetStream API subject (a purge) is tried too."""
from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest_asyncio
from nats.js.api import StreamConfig

from contracts import subjects
from muster.bus.connect import connect
from muster.bus.wire import flush

from .test_governance_grants import People, people, planned, served  # noqa: F401 - the fixtures this file uses

GHOST = "11111111-2222-5333-8444-555555555555"
TARGETS = ("$JS.API.STREAM.PURGE.SCRATCH", f"muster.evt.a.job.{GHOST}", "muster.task.a.default", "$KV.leases.shard.9",
           "muster.cb.a.hosts", "_INBOX.ada.>")


@pytest_asyncio.fixture
async def replying(planned: People) -> AsyncIterator[People]:  # noqa: F811 - the fixture imported above
    from services.notifier.entrypoint import start_notifier

    async with AsyncExitStack() as stack:
        nc = await connect(planned.authed.url, name="notifier", token=planned.tokens["notifier"])
        stack.push_async_callback(nc.close)
        await start_notifier(nc, stack, {})
        yield planned


async def test_no_service_answers_a_tenants_request_anywhere_but_an_inbox(replying: People) -> None:
    system = await connect(replying.authed.url, name="system", token=replying.authed.system_token)
    seen: list[tuple[str, bytes]] = []

    async def saw(msg: Any) -> None:
        seen.append((msg.subject, msg.data))

    try:
        js = system.jetstream()
        await js.add_stream(StreamConfig(name="SCRATCH", subjects=["scratch.>"]))
        await js.publish("scratch.kept", b"kept")
        for target in TARGETS[1:-1]:  # what a service would publish there (the JetStream API answers nobody)
            await system.subscribe(target, cb=saw)
        await flush(system)
        eve = replying.raw["eve"].nc  # tenant b's admin
        asks: list[tuple[str, dict[str, Any]]] = [
            (subjects.auth_request("eve", "whoami"), {}), (subjects.governance_request("b", "eve", "list"), {"kind": "rule"}),
            (subjects.governance_request("b", "eve", "notify-test"), {"kind": "subscription", "name": "nope"}),
            (subjects.operation("b", "eve", "pause"), {"job_id": GHOST}),
            (subjects.solve_request("b", "eve"), {"job_id": "j", "cluster_id": "c", "template": "t", "nodes": 1, "catalog": {}})]
        for subject, body in asks:
            data = json.dumps(body).encode()
            for target in TARGETS:
                await eve.publish(subject, data, reply=target)
            answered = await eve.request(subject, data, timeout=10)  # its own inbox is answered
            assert answered.data, subject
        await flush(system)
        assert seen == [], seen
        assert (await js.stream_info("SCRATCH")).state.messages == 1  # not purged
        events = await js.stream_info(subjects.EVENTS_STREAM, subjects_filter=f"muster.evt.a.job.{GHOST}")
        assert (events.state.subjects or {}) == {}, events.state.subjects  # nothing in tenant a's log
        await js.delete_stream("SCRATCH")
    finally:
        await system.close()


async def test_another_tenants_job_cluster_and_plan_are_answered_as_ids_nobody_has(replying: People) -> None:
    """Attack (tenant b's admin, every right in b, naming tenant a's ids in b's requests): each
    answer is the one an id nobody has gets, so a tenant learns not even that an id exists."""
    from contracts.commands import CreateCluster

    from .test_governance_grants import ask, operate

    made = await operate(replying, "uma", CreateCluster(name="web", template="hadoop-small", nodes=2))
    assert made["type"] == "Accepted", made
    planned_ = await operate(replying, "uma", CreateCluster(name="later", template="hadoop-small", nodes=2, dry_run=True))
    assert planned_["type"] == "DryRun", planned_
    ids = {made["job_id"]: GHOST, made["cluster_id"]: GHOST.replace("1", "2"), planned_["plan_id"]: "0" * len(planned_["plan_id"])}
    extra: dict[str, dict[str, Any]] = {"expand": {"nodes": 3}, "shrink": {"nodes": 1}, "add-services": {"services": ["base"]},
             "remove-services": {"services": ["base"]}, "configure": {"config": {"x": 1}}, "upgrade": {"service": "base"},
             "rollback": {"to_job": made["job_id"]}, "extend-lease": {"by_s": 3600}}
    bodies = {**{v: {"job_id": made["job_id"]} for v in ("pause", "resume", "cancel", "retry", "approve", "reject")},
              **{v: {"cluster_id": made["cluster_id"], **extra.get(v, {})} for v in (
                  "delete", "expand", "shrink", "add-services", "remove-services", "configure", "start", "stop", "restart", "upgrade",
                  "rollback", "extend-lease", "check", "repair")},
              "apply": {"plan_id": planned_["plan_id"]}}
    eve = replying.raw["eve"].nc
    unknown = 0
    for verb, body in bodies.items():
        theirs = await eve.request(subjects.operation("b", "eve", verb), json.dumps(body).encode(), timeout=30)
        nobodys = json.dumps({k: ids.get(v, v) if isinstance(v, str) else v for k, v in body.items()}).encode()
        ghost = await eve.request(subjects.operation("b", "eve", verb), nobodys, timeout=30)
        said = theirs.data.decode()
        for real, fake in ids.items():
            said = said.replace(real, fake)
        assert json.loads(said) == json.loads(ghost.data), (verb, said, ghost.data)
        unknown += "unknown" in said or "no cluster" in said or "no job" in said or "no plan" in said
    assert unknown == len(bodies), unknown  # every verb got as far as looking the id up
    # A schedule of b naming a's cluster or job, as one naming nobody's.
    for verb, command in (("check", {"type": "CheckCluster", "cluster_id": made["cluster_id"]}),
                          ("approve", {"type": "ApproveJob", "job_id": made["job_id"]})):
        mine = await ask(replying, "eve", "put", tenant="b", kind="schedule",
                         entities=[{"name": "s", "every_s": 3600, "verb": verb, "command": command}])
        ghosted = {k: ids.get(v, v) for k, v in command.items()}
        nothing = await ask(replying, "eve", "put", tenant="b", kind="schedule",
                              entities=[{"name": "s", "every_s": 3600, "verb": verb, "command": ghosted}])
        put = json.dumps(mine)
        for real, fake in ids.items():
            put = put.replace(real, fake)
        assert json.loads(put) == nothing or (mine["ok"] and nothing["ok"]), (mine, nothing)
