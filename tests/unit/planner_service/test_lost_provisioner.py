"""A cancelled job's claimed attempt whose provisioner went (docs/decisions/0054): nothing can
claim it again under the closed fence and its provisioner will never report, so it ends lost,
maybe made, and the rollback undoes it, when the cancel closes its fence or when the
provisioner goes later, instead of at the attempt's timeout."""

from __future__ import annotations

from typing import Any

from planner_harness import Harness

from contracts import subjects
from contracts.commands import Accepted, CancelJob, CreateCluster
from contracts.events import LOST_PREFIX, JobRolledBack, TaskClaimed
from muster.ports.eventlog import Append
from muster.readmodel.timeline import describe
from services.planner.adapters import ALL


class Provisioners:
    """Which provisioners are gone for good, or since which log sequence their claims are of a
    process that stopped (`Workers.ended`), as a test says."""

    def __init__(self) -> None:
        self.gone_now: set[str] = set()
        self.since: dict[str, int] = {}
        self.asked: list[set[str]] = []
        self.unreadable = False

    async def live(self) -> list[Any] | None:
        return None

    async def holding(self) -> set[str] | None:
        return None

    async def ended(self, tenant: str, provisioners: set[str]) -> dict[str, int]:
        self.asked.append(set(provisioners))
        if self.unreadable:
            raise RuntimeError("the presence bucket is away")
        return {p: ALL if p in self.gone_now else self.since.get(p, 0) for p in provisioners}


async def _claimed_create(nodes: int = 2) -> tuple[Harness, Provisioners, str]:
    """A create whose every task the fake provisioner claims and never reports on."""
    h = Harness()
    h.workers = provisioners = Provisioners()
    await h.restart()
    h.behaviour = lambda m: "silent"
    reply = await h.send(CreateCluster(name="c", template="hadoop-small", nodes=nodes))
    assert isinstance(reply, Accepted)
    await h.settle()
    return h, provisioners, reply.job_id


def _lost(h: Harness, job_id: str) -> dict[str, Any]:
    return {e.task_id: e for e in h.events(job_id, "TaskAttemptFailed") if e.error.startswith(LOST_PREFIX)}


async def test_a_claimed_attempt_whose_provisioner_goes_after_the_cancel_ends_lost_and_is_undone() -> None:
    h, provisioners, job_id = await _claimed_create()
    assert isinstance(await h.send(CancelJob(job_id=job_id)), Accepted)
    await h.settle()
    assert h.job(job_id).state == "running" and not _lost(h, job_id)  # its provisioner lives: it waits
    assert provisioners.asked == [{"prov-fake"}]

    provisioners.gone_now = {"prov-fake"}
    h.behaviour = lambda m: "succeed"  # (another provisioner runs the rollback)
    await h.planner.provisioner_gone("prov-fake")
    await h.settle()
    lost = _lost(h, job_id)
    assert set(lost) == {"n1000.create", "n1001.create"}
    assert all(e.may_have_made and e.state == "failed" and "prov-fake" in e.error for e in lost.values())
    assert not [e for e in h.events(job_id, "TaskAttemptFailed") if e.state == "timed_out"]
    # Their effect is unknown: the rollback deletes both nodes.
    assert sorted(t.id for t in h.events(job_id, "RollbackPlanned")[0].tasks) == ["undo.n1000.delete", "undo.n1001.delete"]
    assert isinstance(h.final(job_id), JobRolledBack)
    assert not h.planner.timers.armed("timeout")
    # Its history says so (`muster history`).
    lines = {r.event.task_id: describe(r.event) for r in h.log.records if r.type == "TaskAttemptFailed" and r.event.job_id == job_id}
    assert all("provisioner lost: prov-fake stopped" in lines[t] and "the rollback undoes" in lines[t] for t in lost), lines
    # With segments the creates' followers were queued with them: never claimed, the cancel ended them.
    assert all("no provisioner claimed it before the cancel" in line for t, line in lines.items() if t not in lost), lines


async def test_a_provisioner_gone_before_the_cancel_has_its_claims_ended_by_the_close() -> None:
    h, provisioners, job_id = await _claimed_create()
    provisioners.gone_now = {"prov-fake"}
    h.behaviour = lambda m: "succeed"
    assert isinstance(await h.send(CancelJob(job_id=job_id)), Accepted)
    await h.settle()
    assert set(_lost(h, job_id)) == {"n1000.create", "n1001.create"}
    assert isinstance(h.final(job_id), JobRolledBack)


async def test_an_attempt_another_live_provisioner_claimed_again_is_waited_for() -> None:
    h, provisioners, job_id = await _claimed_create()
    # n1000's message came back after the first one died, and a live provisioner claimed it too.
    key = f"{job_id}.n1000.create.1"
    again = TaskClaimed(job_id=job_id, task_id="n1000.create", attempt=1, provisioner="prov-live", worker="w1", delivery=2)
    await h.log.append(subjects.task_events("default", job_id, "n1000.create", "prov-live"), [Append(again, msg_id=f"{key}.claim.2")])
    provisioners.gone_now = {"prov-fake"}
    assert isinstance(await h.send(CancelJob(job_id=job_id)), Accepted)
    await h.settle()
    assert set(_lost(h, job_id)) == {"n1001.create"}
    assert h.job(job_id).task_state["n1000.create"] == "queued" and h.job(job_id).state == "running"


async def test_without_a_cancel_a_provisioner_that_goes_ends_nothing() -> None:
    # The work queue gives its message to another provisioner after the ack wait, which runs the
    # same attempt (tests/fault/test_provisioner_killed.py): nothing is ended here.
    h, provisioners, job_id = await _claimed_create()
    provisioners.gone_now = {"prov-fake"}
    await h.planner.provisioner_gone("prov-fake")
    await h.settle()
    assert not h.events(job_id, "TaskAttemptFailed") and provisioners.asked == []
    assert h.job(job_id).state == "running"


async def test_when_nobody_can_say_whether_it_went_the_claims_wait_as_before() -> None:
    h, provisioners, job_id = await _claimed_create()
    provisioners.gone_now, provisioners.unreadable = {"prov-fake"}, True
    assert isinstance(await h.send(CancelJob(job_id=job_id)), Accepted)
    await h.settle()
    assert not _lost(h, job_id) and h.job(job_id).state == "running"
    assert h.planner.timers.armed("timeout")  # (its timeouts still end them)


async def test_claims_of_a_process_its_id_was_started_again_after_end_once_the_old_one_must_have_stopped() -> None:
    h, provisioners, job_id = await _claimed_create()
    claims = [r for r in h.log.records if r.type == "TaskClaimed" and r.event.job_id == job_id]
    # prov-fake started again under the same id after both claims, and its new record has been
    # there long enough: every claim before its registration is the dead process's.
    provisioners.since = {"prov-fake": claims[-1].seq + 1}
    h.behaviour = lambda m: "succeed"
    assert isinstance(await h.send(CancelJob(job_id=job_id)), Accepted)
    await h.settle()
    assert set(_lost(h, job_id)) == {"n1000.create", "n1001.create"}
    assert isinstance(h.final(job_id), JobRolledBack)


async def test_a_claim_the_new_process_may_have_made_is_waited_for() -> None:
    h, provisioners, job_id = await _claimed_create()
    claims = {r.event.task_id: r.seq for r in h.log.records if r.type == "TaskClaimed" and r.event.job_id == job_id}
    provisioners.since = {"prov-fake": claims["n1001.create"]}  # n1001's claim is at or after the new registration
    assert isinstance(await h.send(CancelJob(job_id=job_id)), Accepted)
    await h.settle()
    assert set(_lost(h, job_id)) == {"n1000.create"} and h.job(job_id).task_state["n1001.create"] == "queued"


def _record(session: str, ttl_s: float) -> Any:
    from datetime import UTC, datetime

    from contracts.tasks import ProvisionerInfo, ProvisionerPresence

    info = ProvisionerInfo(id="p1", session=session, host="h", pid=1, capacity=1, provisioner_class="default",
                           tenants=["default"], started_at=datetime.now(UTC))
    return ProvisionerPresence(info=info, ttl_s=ttl_s, refreshed_at=datetime.now(UTC))


async def test_a_new_session_settles_once_every_earlier_one_must_have_stopped() -> None:
    import asyncio

    from services.planner.adapters import Sessions
    from services.provisioner.presence import MAX_TTL_S

    sessions, settled = Sessions(), asyncio.Event()
    sessions.on_settled = lambda pid: settled.set()
    sessions.seen("p1", _record("s1", 0.05))  # first seen: its earlier sessions' TTL unknown, so the longest allowed
    assert sessions._timers["p1"].when() >= asyncio.get_running_loop().time() + MAX_TTL_S - 1
    sessions.seen("p1", _record("s1", 0.05))  # a refresh changes nothing
    sessions.seen("p1", _record("s2", 0.01))  # started again: settled after the longest TTL seen for the id
    await asyncio.wait_for(settled.wait(), 5)
    assert sessions.settled == {"p1": "s2"}
    sessions.seen("p1", None)  # gone
    assert sessions.settled == {} and sessions.current == {}
    sessions.close()
