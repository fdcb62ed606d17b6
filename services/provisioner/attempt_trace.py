"""A held task's spans, when tracing is on: the claim's and the run's, in the trace its task
message names (its attempt's span, `traceparent`); docs/tracing.md."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from contracts.records import Append
from contracts.tasks import TaskMessage, TaskOutcome
from muster import tracing
from muster.bus.protocol import parse_headers

from .domain.actions import Action, Claim, Read

tracer = tracing.Tracer("muster.provisioner")


class Executor(Protocol):
    async def execute(self, task: TaskMessage) -> TaskOutcome: ...


@dataclass(slots=True)
class Traced:
    """A held task's trace: its attempt's span (from the task message), its claim's, its run's."""

    attempt: str
    claim: str | None = None
    claimed_from: float = 0.0
    run: str | None = None


class Traces:
    """The traces of the tasks a worker holds, by held id (empty unless tracing is on and the
    task message names its attempt's span). `held` is falsy when there are none, so the worker
    asks nothing more of a task that is not traced."""

    def __init__(self, provisioner: str) -> None:
        self.provisioner = provisioner
        self.held: dict[int, Traced] = {}

    def delivered(self, actions: list[Action], header_block: bytes, still_held: Mapping[int, object]) -> None:
        """The delivery's claim goes in the trace its message names (its attempt's span)."""
        if not header_block or not tracing.enabled() or (context := attempt_of(header_block)) is None:
            return
        if len(self.held) > 2 * len(still_held) + 64:
            self.held = {h: t for h, t in self.held.items() if h in still_held}  # those let go without an outcome
        for action in actions:
            if isinstance(action, Claim | Read):  # (a segment delivered again reads before it claims)
                self.held[action.held] = Traced(context)

    def claim(self, held: int, append: Append, task: TaskMessage | None = None) -> Append:
        """The claim's event, in a span of its own when the task is traced: under its attempt's
        span, a segment's later step's own (`TaskStep.trace`; one taken up after its finished
        steps claims such a step first)."""
        traced = self.held.get(held)
        if traced is None:
            return append
        own = tracing.valid(task.trace) if task is not None else None
        if own is not None and own != traced.attempt:
            traced = self.held[held] = Traced(own)
        traced.claim, traced.claimed_from = tracing.child(traced.attempt), time.time()
        return replace(append, trace=traced.claim)

    def claimed(self, held: int, written: asyncio.Future[int], task: TaskMessage | None) -> None:
        """The claim's span, once the log answered."""
        traced = self.held.get(held)
        if traced is None:
            return
        failed = None if written.cancelled() or written.exception() is None else str(written.exception())
        tracer.record("claim", traced.claim, traced.attempt, traced.claimed_from, time.time(), error=failed,
                      provisioner=self.provisioner, **attributes(task))
        if failed:
            self.held.pop(held, None)

    def outcome(self, held: int, append: Append) -> Append:
        """The outcome's event, in the run's span (the task's trace ends here)."""
        traced = self.held.pop(held, None)
        return replace(append, trace=traced.run) if traced is not None and traced.run else append

    def step(self, held: int, append: Append, following: TaskMessage) -> Append:
        """A segment step's outcome, in its run's span; the step after it goes in its own
        attempt's span (docs/decisions/0058)."""
        out = self.outcome(held, append)
        if (own := tracing.valid(following.trace)) is not None:
            self.held[held] = Traced(own)
        return out

    async def run(self, executor: Executor, held: int, task: TaskMessage) -> TaskOutcome:
        traced = self.held.get(held)
        return await (executor.execute(task) if traced is None else traced_run(executor, traced, task, self.provisioner))


def attempt_of(header_block: bytes) -> str | None:
    """The attempt's span a delivered task message names, if it is valid."""
    return tracing.valid(parse_headers(header_block)[1].get(tracing.HEADER))


def attributes(task: TaskMessage | None) -> dict[str, Any]:
    if task is None:
        return {}
    return {"tenant": task.tenant, "cluster": task.cluster_id, "job": task.job_id, "task": task.task_id, "attempt": task.attempt}


async def traced_run(executor: Executor, traced: Traced, task: TaskMessage, provisioner: str) -> TaskOutcome:
    """The plugin's run as a span of its own; the outcome is appended in its context."""
    with tracer.span(f"run {task.task_id}", traced.attempt, kind="consumer", provisioner=provisioner,
                     action=task.action.value, **attributes(task)) as span:
        traced.run = tracing.current()
        outcome = await executor.execute(task)
        if not outcome.ok:
            tracing.set_error(span, outcome.error or "failed")
        return outcome
