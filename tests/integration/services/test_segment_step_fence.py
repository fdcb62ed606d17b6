"""A late copy of a segment stops at the step the planner ended (docs/decisions/0058): a real
planner, solver and provisioner on a real nats-server. The planner's end of a follower stores its
`StepClosed`; the provisioner's outcome of the step before goes with the follower's claim only
while that is empty, so the follower is refused before its plugin starts."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from typing import Any

import pytest

from contracts import subjects
from contracts.commands import Accepted, CreateCluster
from contracts.events import JobSucceeded, TaskClaimed, TaskFailed
from muster.bus.connect import connect
from muster.bus.eventstore import Append, EventStore
from muster.bus.streams import ensure_streams
from muster.catalog.store import apply_catalog
from muster.client import MusterClient
from services.planner.app import PlannerConfig
from services.planner.domain import segments
from services.planner.entrypoint import start_planner
from services.provisioner.entrypoint import start_workers
from services.provisioner.plugins import PluginRegistry
from services.provisioner.worker import WorkerConfig, Workers
from services.solver.entrypoint import start_solver

from .conftest import Terminations, first_record, quick_demo_catalog

pytestmark = [pytest.mark.nats, pytest.mark.timeout(120)]


class Stack:
    def __init__(self, url: str, exit_stack: AsyncExitStack, client: MusterClient, store: EventStore) -> None:
        self.url, self.exit_stack, self.client, self.store = url, exit_stack, client, store

    async def provisioner(self) -> Workers:
        nc = await connect(self.url, name="provisioner")
        self.exit_stack.push_async_callback(nc.close)
        registry = PluginRegistry.discover()
        self.exit_stack.push_async_callback(registry.aclose)
        return await start_workers(nc, self.exit_stack, registry, WorkerConfig(provisioner_id="prov-1", capacity=2))

    async def first(self, subject: str, match: Callable[[Any], bool], timeout: float = 30) -> Any:
        """The first record on `subject` that `match`es (from the start of the log)."""
        return await first_record(self.store, subject, match, timeout)

    async def story(self, job_id: str) -> list[Any]:
        return await self.store.read_many([*subjects.job_history_filters("default", job_id),
                                           subjects.job_task_outcomes("default", job_id)])


async def _stack(url: str, exit_stack: AsyncExitStack, create_ms: int, **config: Any) -> Stack:
    ncs = []
    for name in ("planner", "solver", "client"):
        nc = await connect(url, name=name)
        ncs.append(nc)
        exit_stack.push_async_callback(nc.close)
    await ensure_streams(ncs[0].jetstream())
    await start_planner(ncs[0], exit_stack, PlannerConfig(instance="planner-test", segments=True, **config))
    await start_solver(ncs[1], exit_stack, "solver-test")
    store = EventStore(ncs[2])
    catalog = quick_demo_catalog()
    sim = catalog.providers["sim"]
    latency = f"{create_ms}-{create_ms}"
    catalog.providers["sim"] = sim.model_copy(update={"provisioner": {**sim.provisioner, "latency_ms_create": latency}})
    await apply_catalog(store, "default", catalog)
    return Stack(url, exit_stack, MusterClient(ncs[2]), store)


@pytest.fixture
async def slow_create(fresh_nats: str) -> AsyncIterator[Stack]:
    async with AsyncExitStack() as exit_stack:
        yield await _stack(fresh_nats, exit_stack, 1500)


@pytest.fixture
async def timing_out(fresh_nats: str) -> AsyncIterator[Stack]:
    """Every create outlasts its attempt's timeout (it still runs to its end: a stale attempt)."""
    async with AsyncExitStack() as exit_stack:
        yield await _stack(fresh_nats, exit_stack, 2500, task_timeout_s=1.0, max_attempts=2)


def _unrun_claims(story: list[Any]) -> tuple[set[tuple[str, int]], set[tuple[str, int]]]:
    """The followers the planner ended unrun, and those of them claimed."""
    ended = {(r.event.task_id, r.event.attempt) for r in story
             if r.type == "TaskAttemptFailed" and r.event.error in segments.UNRUN}
    claimed = {(r.event.task_id, r.event.attempt) for r in story if r.type == "TaskClaimed"}
    return ended, ended & claimed


async def test_a_follower_whose_step_before_failed_on_another_copy_first_is_refused_and_not_run(
        slow_create: Stack) -> None:
    """Decision 58's second case: a segment's message runs on two provisioners at once, and one
    copy's failure of a step is taken first. The planner ends the followers; the other copy's
    success of that step comes after, and its next claim is refused: the follower never runs
    there, the segment stops, and the retry's segment does the node's work."""
    stack = slow_create
    workers = await stack.provisioner()
    created = await stack.client.send("default", CreateCluster(name="copies", template="hadoop-small", nodes=2))
    assert isinstance(created, Accepted)
    job = created.job_id
    claim = await stack.first(subjects.job_task_outcomes("default", job), lambda r: r.type == "TaskClaimed")
    head = claim.event.task_id
    assert head.endswith(".create")
    # The other copy (as a provisioner that got the same message would write it): its claim of
    # the step, then its failure, stored while prov-1's create still runs (1.5 s).
    copy = subjects.task_events("default", job, head, "prov-copy")
    await stack.store.append(copy, [
        Append(TaskClaimed(job_id=job, task_id=head, attempt=1, provisioner="prov-copy", worker="prov-copy/w0"),
               msg_id=f"{job}.{head}.1.claim.2"),
        Append(TaskFailed(job_id=job, task_id=head, attempt=1, provisioner="prov-copy", worker="prov-copy/w0",
                          error="the copy's create failed"), msg_id=f"{job}.{head}.1.outcome")])

    final = await stack.client.wait(job, timeout=90)
    assert isinstance(final, JobSucceeded), final
    story = await stack.story(job)
    ended, claimed = _unrun_claims(story)
    assert ended and not claimed  # every follower the planner ended: never claimed
    assert all(task.split(".", 1)[0] == head.split(".", 1)[0] and attempt == 1 for task, attempt in ended)
    # The copy's failure is the step's (the first stored; prov-1's success, under the same
    # key, is a repeat the log keeps once), and prov-1's segment stopped there.
    late = [r for r in story if r.type in ("TaskSucceeded", "TaskFailed") and r.event.task_id == head and r.event.attempt == 1]
    assert late[0].type == "TaskFailed" and late[0].event.provisioner == "prov-copy"
    assert workers.ended == 1 and workers.cancelled == 0


async def test_a_late_head_after_its_timeout_runs_none_of_its_followers(timing_out: Stack) -> None:
    """Decision 58's first case: a head that runs past its attempt's timeout (its create takes
    2.5 s, the attempt 1 s) still runs to its end, a stale attempt; the planner ended its
    followers at the timeout, and its success's next claim is refused: they never run late. A
    retry's delivery that came again after its own timeout (it waited for a slot) reads that its
    next step was ended (its `StepClosed`) and ends unrun, as the planner's answer says it."""
    stack = timing_out
    terminated = Terminations()
    await terminated.start(stack.store.nc)
    workers = await stack.provisioner()
    created = await stack.client.send("default", CreateCluster(name="late", template="hadoop-small", nodes=2))
    assert isinstance(created, Accepted)
    final = await stack.client.wait(created.job_id, timeout=90)
    assert not isinstance(final, JobSucceeded)  # (every create timed out: the job gave up)
    job = created.job_id
    story = await stack.story(job)
    timed_out = {(r.event.task_id, r.event.attempt) for r in story if r.type == "TaskAttemptFailed"
                 and r.event.state == "timed_out" and r.event.task_id.endswith(".create")}
    assert timed_out
    # Each timed-out create's segment ends terminated, once: stopped after its late run (its
    # next claim refused), or unrun (its delivery came again after the planner ended its next
    # step, or its claim came after the job's cancel fence closed).
    await terminated.reach(len(timed_out))
    story = await stack.story(job)
    ran = timed_out & {(r.event.task_id, r.event.attempt) for r in story if r.type == "TaskClaimed"}
    assert {(task_id, 1) for task_id, _ in timed_out} <= ran  # every first attempt was claimed at once, and ran
    # Each that ran, ran to its end (the last maybe after the job's): its success stored, late.
    # Its segment's next claim was refused before that outcome was sent (the writer tells the
    # claim first), so the worker has counted it by then.
    for task_id, attempt in ran:
        await stack.first(subjects.job_task_outcomes("default", job), _late(task_id, attempt))
    story = await stack.story(job)
    ended, claimed = _unrun_claims(story)
    assert ended and not claimed
    assert {r.event.error for r in story if r.type == "TaskAttemptFailed" and (r.event.task_id, r.event.attempt) in ended} \
        == {segments.STRANDED_BY_TIMEOUT}
    assert workers.ended == len(ran) and workers.cancelled + len(ran) <= len(timed_out)


def _late(task_id: str, attempt: int) -> Callable[[Any], bool]:
    return lambda r: r.type == "TaskSucceeded" and (r.event.task_id, r.event.attempt) == (task_id, attempt)
