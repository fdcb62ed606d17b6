"""A held task's spans, when tracing is on: the claim's and the run's, in the trace its task
message names (its attempt's span, `traceparent`); docs/tracing.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from contracts.tasks import TaskMessage, TaskOutcome
from muster import tracing
from muster.bus.protocol import parse_headers

tracer = tracing.Tracer("muster.provisioner")


class Runs(Protocol):
    async def execute(self, task: TaskMessage) -> TaskOutcome: ...


@dataclass(slots=True)
class Traced:
    """A held task's trace: its attempt's span (from the task message), its claim's, its run's."""

    attempt: str
    claim: str | None = None
    claimed_from: float = 0.0
    run: str | None = None


def attempt_of(header_block: bytes) -> str | None:
    """The attempt's span a delivered task message names, if it is valid."""
    return tracing.valid(parse_headers(header_block)[1].get(tracing.HEADER))


def attributes(task: TaskMessage | None) -> dict[str, Any]:
    if task is None:
        return {}
    return {"tenant": task.tenant, "cluster": task.cluster_id, "job": task.job_id, "task": task.task_id, "attempt": task.attempt}


async def traced_run(executor: Runs, traced: Traced, task: TaskMessage, provisioner: str) -> TaskOutcome:
    """The plugin's run as a span of its own; the outcome is appended in its context."""
    with tracer.span(f"run {task.task_id}", traced.attempt, kind="consumer", provisioner=provisioner,
                     action=task.action.value, **attributes(task)) as span:
        traced.run = tracing.current()
        outcome = await executor.execute(task)
        if not outcome.ok:
            tracing.set_error(span, outcome.error or "failed")
        return outcome
