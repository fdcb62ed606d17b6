"""A segment's steps in the provisioner's part of a trace (docs/tracing.md, docs/decisions/0058):
each later step's claim and run go in its own attempt's span (`TaskStep.trace`), as the head's
go in the one its message's header names, and each step's outcome names the run that made it.
Driven as `Workers._do` drives `Traces` beside the core."""

from __future__ import annotations

import asyncio
from typing import Any

from contracts.records import Append
from contracts.tasks import TaskOutcome
from services.provisioner.attempt_trace import Traces
from services.provisioner.domain.actions import Claim, Read, Run, Store, StoreStep, WorkerConfig
from services.provisioner.domain.core import WorkerCore
from services.provisioner.plugins.testing import make_task

TRACE = "ab" * 16


def _context(span: int) -> str:
    return f"00-{TRACE}-{span:016x}-01"


class Succeeds:
    async def execute(self, task: Any) -> TaskOutcome:
        return TaskOutcome(ok=True)


def _segment(again: bool = False) -> bytes:
    def step(task_id: str, action: str, **update: Any) -> Any:
        return make_task(action, service="s").model_copy(update={"job_id": "j", "task_id": task_id, "fence": "fence.j", **update})

    head = step("n1.create", "create", segment="n1.create.1", again=again)
    rest = [step("n1.confirm", "confirm", trace=_context(2)), step("n1.bootstrap", "bootstrap", trace=_context(3))]
    return head.model_copy(update={"then": rest}).model_dump_json().encode()


async def _run(core: WorkerCore, traces: Traces, actions: list[Any]) -> list[Append]:
    """Claim, run and store each step as the worker does; the outcomes' appends as sent."""
    sent: list[Append] = []
    while True:
        [claim] = [a for a in actions if isinstance(a, Claim)]
        task = core.held[claim.held].task
        traces.claim(claim.held, claim.append, task)
        written: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        written.set_result(1)
        traces.claimed(claim.held, written, task)
        [run] = [a for a in core.claimed(claim.held, 0.0) if isinstance(a, Run)]
        outcome = await traces.run(Succeeds(), claim.held, run.task)
        actions = core.ran(claim.held, outcome, 0.1)
        [store] = [a for a in actions if isinstance(a, Store | StoreStep)]
        if isinstance(store, StoreStep):
            sent.append(traces.step(store.held, store.append, core.held[store.held].task))
            continue
        sent.append(traces.outcome(store.held, store.append))
        return sent


def _under(spans: Any, name: str) -> list[int]:
    """The parent span of each span of that name, in the order they ended."""
    return [s.parent.span_id for s in spans.get_finished_spans() if s.name.split(" ")[0] == name]


async def test_each_step_claims_and_runs_in_its_own_attempts_span(spans: Any) -> None:
    core, traces = WorkerCore(WorkerConfig(provisioner_id="p2", capacity=2)), Traces("p2")
    core.queue_declared("t1", 30.0)
    actions = core.delivered("t1", "r", _segment(), 1, 0.0)
    traces.delivered(actions, f"NATS/1.0\r\ntraceparent: {_context(1)}\r\n\r\n".encode(), core.held)
    outcomes = await _run(core, traces, actions)
    assert _under(spans, "claim") == _under(spans, "run") == [1, 2, 3]
    runs = [s for s in spans.get_finished_spans() if s.name.startswith("run ")]
    assert [o.trace for o in outcomes] == [_context(r.context.span_id) for r in runs]


async def test_a_segment_taken_up_after_its_finished_steps_claims_in_that_steps_span(spans: Any) -> None:
    from contracts.events import TaskSucceeded

    core, traces = WorkerCore(WorkerConfig(provisioner_id="p2", capacity=2)), Traces("p2")
    core.queue_declared("t1", 30.0)
    [read] = core.delivered("t1", "r", _segment(again=True), 1, 0.0)
    assert isinstance(read, Read)
    traces.delivered([read], f"NATS/1.0\r\ntraceparent: {_context(1)}\r\n\r\n".encode(), core.held)
    done = TaskSucceeded(job_id="j", task_id="n1.create", attempt=1, provisioner="p1", worker="p1/w0")
    await _run(core, traces, core.read(read.held, [done], 0.1))
    assert _under(spans, "claim") == _under(spans, "run") == [2, 3]
