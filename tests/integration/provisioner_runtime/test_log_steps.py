"""In-process workers (no planner to ask) on a real nats-server: a segment sent again reads its
steps from the log itself (`stepreads.LogSteps`, docs/decisions/0058), and one whose next step the
planner ended unrun (its `StepClosed` stored) is ended, nothing claimed nor run, where the same
segment with no step ended is taken up after its finished head."""

from __future__ import annotations

import asyncio
import json

import pytest
from nats.aio.msg import Msg

from contracts import subjects
from contracts.events import StepClosed, TaskSucceeded
from contracts.tasks import TaskMessage
from muster.bus.eventstore import Append, EventStore
from muster.bus.wire import flush
from services.provisioner.plugins.testing import make_task

from .conftest import DEADLINE_S, Bench, HeldExecutor

pytestmark = pytest.mark.nats


async def _sent_again(bench: Bench, node: str) -> tuple[TaskMessage, int]:
    """A segment (`<node>.create`, then `<node>.confirm`) sent again by its planner, its head's
    success stored by a provisioner since lost; returns it and its queue sequence."""
    def step(action: str) -> TaskMessage:
        return make_task(action, service="s", task_id=f"{node}.{action}", node_id=node, tenant=bench.tenant,
                         cluster_id=f"c-{bench.tenant}").model_copy(update={"job_id": "j1"})
    head = step("create").model_copy(update={"then": [step("confirm")], "segment": f"{node}.create.1", "again": True})
    await EventStore(bench.nc).append(subjects.task_events(bench.tenant, "j1", head.task_id, "prov-gone"), [Append(
        TaskSucceeded(job_id="j1", task_id=head.task_id, attempt=1, provisioner="prov-gone", worker="prov-gone/w0"),
        msg_id=f"j1.{head.task_id}.1.outcome")])
    ack = await bench.nc.jetstream().publish(subjects.task_queue(bench.tenant, "default"), head.model_dump_json().encode(),
                                             headers={"Nats-Msg-Id": f"j1.{head.segment}"})
    return head, ack.seq


async def test_a_segment_sent_again_whose_next_step_was_ended_unrun_is_terminated_unrun(bench: Bench) -> None:
    executor = HeldExecutor(hold=False)
    await bench.workers(executor, "prov-late")
    terminated: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def on_terminated(msg: Msg) -> None:
        if not terminated.done():
            terminated.set_result(json.loads(msg.data)["stream_seq"])
    durable = subjects.task_consumer(bench.tenant, "default")
    await bench.nc.subscribe(f"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.{subjects.TASKS_STREAM}.{durable}", cb=on_terminated)
    await flush(bench.nc)
    # n1's confirm was ended by the planner (its create timed out; the create's success came late).
    await EventStore(bench.nc).append(subjects.step_closed(bench.tenant, "j1", "n1.confirm", 1), [
        Append(StepClosed(job_id="j1", task_id="n1.confirm", attempt=1), msg_id="j1.n1.confirm.1.closed")])
    _, ended_seq = await _sent_again(bench, "n1")
    await _sent_again(bench, "n2")

    assert await asyncio.wait_for(terminated, DEADLINE_S) == ended_seq
    await bench.log.wait_for(lambda log: len(log.of("TaskSucceeded", "n2.confirm")) == 1)
    assert [t.task_id for t in executor.started] == ["n2.confirm"]  # n2 taken up after its create; n1 not at all
    assert [c.task_id for c in bench.log.of("TaskClaimed")] == ["n2.confirm"]
