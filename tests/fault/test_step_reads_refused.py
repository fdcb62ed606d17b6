"""The planner's refusal of a step read (docs/decisions/0058, item 5), real processes, auth on.

A segment delivered again asks the planner acting for its job what the log holds of its steps
(`muster.q.<tenant>.<provisioner>.steps`); the planner answers only a provisioner granted the
queue the job's tasks go on. Here provisioner-2 serves another class (`--class gpu`: its grant
is `queue:gpu`), so the bus lets it ask in the tenant, but the planner must not tell it the
job's steps: asked with its own credentials, through the provisioner's own client
(`AskPlanner`), it is refused with the reason (`StepsRefused`), while provisioner-1, granted the
job's queue, is answered the same question (the job has ended: every step's outcome). A
provisioner takes tasks only from the queues it is granted, so a real one meets a refusal only
when its grants change between a delivery and its ask; this is the planner's side of it, with
its real rights and routing.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from nats.aio.client import Client

from contracts.commands import Accepted, CreateCluster
from contracts.events import JobSucceeded, TaskQueued, TaskSucceeded
from contracts.tasks import TaskStep
from muster.bus.connect import connect, read_credentials_file
from services.provisioner.plugins.testing import make_task
from services.provisioner.stepreads import AskPlanner, StepsRefused

from . import segment_faults as sf
from .harness import FaultStack, demo_catalog

pytestmark = [pytest.mark.fault, pytest.mark.timeout(200)]
T = sf.T
REFUSED = "a segment's steps not read for a requester"


async def test_a_provisioner_not_granted_the_jobs_queue_is_refused_its_steps_and_one_granted_is_answered(
        tmp_path: Path) -> None:
    async with await FaultStack.single(tmp_path, provisioners=2, extra_args={"provisioner-2": ["--class", "gpu"]}) as fs, \
            AsyncExitStack() as connections:
        await fs.load_catalog(T, demo_catalog(latency_ms="20-80"))
        replies: list[Accepted] = []
        await fs.sending(T, CreateCluster(name="refused", template="hadoop-small", nodes=2), replies)()
        job = replies[0].job_id
        final = await fs.wait_final(job, timeout=90)
        assert isinstance(final, JobSucceeded), final
        # A segment of the job, from its head to its last step (the planner still acts for the
        # job, its cluster's current one).
        queued = {r.event.task_id: r.event for r in await sf.story(fs, job) if r.type == "TaskQueued"}
        chain = [max((q for q in queued.values() if q.after is not None), key=lambda q: _depth(queued, q.task_id)).task_id]
        while (before := queued[chain[0]].after) is not None:
            chain.insert(0, before)
        assert len(chain) > 2, chain
        steps = [_step(job, task_id, queued[task_id].attempt) for task_id in chain]

        other = await _asking_as(fs, connections, "prov-2")
        with pytest.raises(StepsRefused, match="^prov-2 is not granted queue:default of tenant default$"):
            await AskPlanner(other, "prov-2")(steps)
        granted = await _asking_as(fs, connections, "prov-1")
        answer = await AskPlanner(granted, "prov-1")(steps)
        assert not answer.stale and all(isinstance(o, TaskSucceeded) for o in answer.outcomes)
        assert [o.task_id for o in answer.outcomes] == chain
        refusals = sf.said(fs, "planner", REFUSED)
        assert [(r.get("requester"), r.get("job")) for r in refusals] == [("prov-2", job)], refusals
        # The ask itself was the bus's to allow (no permission violation on `.steps`): the refusal is the planner's.
        await sf.settled(fs, f"[step read refused] prov-2 refused the steps {chain} of {job}; prov-1 answered "
                             f"{len(answer.outcomes)} outcomes")


def _depth(queued: dict[str, TaskQueued], task_id: str) -> int:
    """How many steps come before `task_id` in its segment."""
    depth = 0
    while (before := queued[task_id].after) is not None:
        depth, task_id = depth + 1, before
    return depth


def _step(job: str, task_id: str, attempt: int) -> TaskStep:
    """A step as the ask names it (its tenant, job, task and attempt; the rest is not sent)."""
    return make_task("install", tenant=T, task_id=task_id, attempt=attempt).model_copy(update={"job_id": job})


async def _asking_as(fs: FaultStack, stack: AsyncExitStack, provisioner_id: str) -> Client:
    """A connection of the test with a provisioner's own credentials (as `muster up` made them)."""
    assert fs.deployment.auth_dir is not None
    token = read_credentials_file(fs.deployment.auth_dir / f"{provisioner_id}.cred")
    nc = await connect(fs.url, name=f"{provisioner_id}-ask", token=token, data_dir=fs.base, max_reconnect_attempts=0)
    stack.push_async_callback(nc.close)
    return nc
