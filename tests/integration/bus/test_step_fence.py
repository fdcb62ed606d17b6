"""A segment step's outcome and the next step's claim in one lane batch, each with its own
fence (docs/decisions/0058): the outcome expects the next step's `StepClosed` subject empty, the
claim its job's cancel fence. The server's refusal (10071) does not say which failed; the writer
tells them apart, against a real nats-server."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.client import Client

from contracts import subjects
from contracts.events import StepClosed, TaskClaimed, TaskSucceeded
from muster.bus.eventstore import Append, EventStore
from muster.ports.eventlog import ConcurrencyError, StepEnded

pytestmark = pytest.mark.nats


class Segment:
    """One job's subjects, and the appends a provisioner's core makes after a step of a segment."""

    def __init__(self, tenant: str, job: str = "j") -> None:
        self.tenant, self.job = tenant, job
        self.fence = subjects.claims_closed(tenant, job, 0)

    def closed(self, task_id: str) -> str:
        return subjects.step_closed(self.tenant, self.job, task_id, 1)

    def subject(self, task_id: str) -> str:
        return subjects.task_events(self.tenant, self.job, task_id, "p")

    def step(self, store: EventStore, done: str, nxt: str, *, fence: bool = True) -> tuple[asyncio.Future[int], asyncio.Future[int]]:
        """`done`'s outcome and `nxt`'s claim, as `WorkerCore.ran` makes them."""
        lane = self.fence if fence else self.closed(nxt)
        outcome = Append(TaskSucceeded(job_id=self.job, task_id=done, attempt=1, provisioner="p", worker="p/w0"),
                         msg_id=f"{self.tenant}.{done}.outcome", lane=lane, step_fence=self.closed(nxt))
        claim = Append(TaskClaimed(job_id=self.job, task_id=nxt, attempt=1, provisioner="p", worker="p/w0"),
                       msg_id=f"{self.tenant}.{nxt}.claim", only_if_empty=self.fence if fence else None,
                       follows=outcome.msg_id, lane=None if fence else lane)
        return store.submit(self.subject(done), outcome), store.submit(self.subject(nxt), claim)

    async def end(self, store: EventStore, task_id: str) -> None:
        """What the planner's save stores when it ends `task_id` unrun."""
        await store.append(self.closed(task_id), [Append(StepClosed(job_id=self.job, task_id=task_id, attempt=1),
                                                         msg_id=f"{self.tenant}.{task_id}.closed")])

    async def cancel(self, store: EventStore) -> None:
        await store.append(self.fence, [Append(TaskClaimed(job_id=self.job, task_id="x", attempt=1, provisioner="p",
                                                           worker="p/w9"), msg_id=f"{self.tenant}.fence")])

    async def types(self, store: EventStore, task_id: str) -> list[str]:
        return [r.type for r in await store.read(self.subject(task_id))]


async def _store(nc: Client) -> EventStore:
    store = EventStore(nc)  # group commit, as a provisioner's

    async def unreadable(subject: str) -> None:  # a provisioner may not read the log (docs/security.md)
        raise AssertionError(f"asked for the last message of {subject}")

    store.writer.last = unreadable
    await store.writer.publisher.start()
    return store


async def test_an_outcome_and_the_next_claim_go_as_one_batch_while_nothing_ended_the_step(nc: Client, tenant: str) -> None:
    store, seg = await _store(nc), Segment(tenant)
    outcome, claim = seg.step(store, "n1.create", "n1.confirm")
    stored, claimed = await asyncio.gather(outcome, claim)
    assert claimed == stored + 1 and store.writer.sent == 1  # one batch, nothing more on the happy path
    assert await seg.types(store, "n1.confirm") == ["TaskClaimed"]


async def test_a_claim_of_a_step_the_planner_ended_is_refused_as_ended_not_cancelled(nc: Client, tenant: str) -> None:
    """The planner ended n1.confirm (another copy's failure of n1.create was taken first, or
    n1.create timed out): the late copy's outcome is stored all the same (a late result), its
    claim refused with `StepEnded`; another node's claim in the same batch, whose step nobody
    ended, lands: the job is not cancelled."""
    store, seg = await _store(nc), Segment(tenant)
    await seg.end(store, "n1.confirm")
    outcome, claim = seg.step(store, "n1.create", "n1.confirm")
    other = store.submit(seg.subject("n2.create"), Append(TaskClaimed(job_id="j", task_id="n2.create", attempt=1,
                                                                     provisioner="p", worker="p/w1"),
                                                         msg_id=f"{tenant}.n2.claim", only_if_empty=seg.fence))
    stored, refused, landed = await asyncio.gather(outcome, claim, other, return_exceptions=True)
    assert isinstance(refused, StepEnded), refused
    assert isinstance(stored, int) and isinstance(landed, int)
    assert await seg.types(store, "n1.create") == ["TaskSucceeded"]
    assert await seg.types(store, "n1.confirm") == []
    assert await seg.types(store, "n2.create") == ["TaskClaimed"]


async def test_a_closed_cancel_fence_still_refuses_the_claim_as_cancelled(nc: Client, tenant: str) -> None:
    """docs/decisions/0050's guarantee kept: no claim after the cancel, and the refusal is told
    as the cancel's (not a step's end), the outcome stored alone."""
    store, seg = await _store(nc), Segment(tenant)
    await seg.cancel(store)
    outcome, claim = seg.step(store, "n1.create", "n1.confirm")
    stored, refused = await asyncio.gather(outcome, claim, return_exceptions=True)
    assert isinstance(refused, ConcurrencyError) and not isinstance(refused, StepEnded), refused
    assert isinstance(stored, int)
    assert await seg.types(store, "n1.create") == ["TaskSucceeded"]
    assert await seg.types(store, "n1.confirm") == []


async def test_a_step_ended_and_its_job_cancelled_is_never_claimed(nc: Client, tenant: str) -> None:
    store, seg = await _store(nc), Segment(tenant)
    await seg.cancel(store)
    await seg.end(store, "n1.confirm")
    outcome, claim = seg.step(store, "n1.create", "n1.confirm")
    stored, refused = await asyncio.gather(outcome, claim, return_exceptions=True)
    assert isinstance(refused, ConcurrencyError) and isinstance(stored, int)
    assert await seg.types(store, "n1.confirm") == []


async def test_a_segment_with_no_cancel_fence_is_stopped_by_its_steps_end(nc: Client, tenant: str) -> None:
    """A rollback's segment: no cancel fence, the step's own lane."""
    store, seg = await _store(nc), Segment(tenant)
    outcome, claim = seg.step(store, "n1.stop", "n1.delete", fence=False)
    assert (await claim) == (await outcome) + 1
    await seg.end(store, "n1.remove")
    outcome, claim = seg.step(store, "n1.delete", "n1.remove", fence=False)
    stored, refused = await asyncio.gather(outcome, claim, return_exceptions=True)
    assert isinstance(refused, StepEnded) and isinstance(stored, int)
    assert await seg.types(store, "n1.remove") == []
