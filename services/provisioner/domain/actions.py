"""What a provisioner's worker is configured with, and what its core asks the adapter to do.

Actions, in the order the core returns them: `Read` (a segment delivered again: its steps'
outcomes, then tell the core `read`), `Claim` (append the claim, then tell the core
`claimed`), `Run` (run the plugin, then `ran`), `Store` (append the outcome, then `stored`),
`StoreStep` (a segment step's outcome, beside the next step's claim),
`Stop` (stop a plugin `Run` started: its lease lapsed), `Answer` (settle the delivery: ack, nak with
a delay, term, in progress), `Note` (log it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from contracts.events import TaskFailed, TaskSucceeded
from contracts.records import Append
from contracts.tasks import TaskMessage, TaskOutcome, TaskStep, trim_output
from muster.ports.delivery import Settle


@dataclass
class WorkerConfig:
    provisioner_id: str
    tenants: tuple[str, ...] = ("default",)
    provisioner_class: str = "default"
    capacity: int = 8
    ack_wait_s: float = 30.0
    avoid_deliveries: int = 2
    """A provisioner named in a task's `avoid` lets this many deliveries of it go."""
    avoid_delay_s: float = 0.5
    """...each coming back to the queue after this delay, for another provisioner to take."""
    claim_ahead: int | None = None
    """Tasks taken and claimed beyond `capacity` while the slots turn over fast; None =
    `capacity`, 0 = never. At most `capacity` plugins run at once whatever this is."""


def lets_go(task: TaskMessage, provisioner_id: str, delivery: int, config: WorkerConfig) -> bool:
    """Prefer another provisioner on retry: one that ran an earlier attempt (it is in `avoid`)
    passes on the first `avoid_deliveries` deliveries, and runs the task after that."""
    return provisioner_id in task.avoid and delivery <= config.avoid_deliveries


def attempt_key(task: TaskMessage) -> str:
    return f"{task.job_id}.{task.task_id}.{task.attempt}"


def outcome_event(task: TaskMessage, outcome: TaskOutcome, provisioner: str, worker: str) -> TaskSucceeded | TaskFailed:
    """What a plugin's outcome becomes in the log (its output trimmed)."""
    done: dict[str, Any] = {"job_id": task.job_id, "task_id": task.task_id, "attempt": task.attempt, "provisioner": provisioner,
            "worker": worker, "stdout": trim_output(outcome.stdout), "stderr": trim_output(outcome.stderr)}
    if outcome.ok:
        return TaskSucceeded(**done, result=outcome.result, ipaddresses=outcome.ipaddresses, hostname=outcome.hostname)
    return TaskFailed(**done, error=outcome.error or "failed", may_have_made=outcome.may_have_made, permanent=outcome.permanent)


@dataclass(frozen=True, slots=True)
class _Write:
    held: int
    subject: str
    append: Append


@dataclass(frozen=True, slots=True)
class Claim(_Write):
    """Append the claim; then tell the core `claimed`. `marker`: (subject, `StepOpened`) to append
    just before it, the two one batch, when no step's outcome goes before it: the marker expects
    the attempt's `StepClosed` subject empty, so an attempt the planner ended is not claimed
    (docs/decisions/0059); the claim's answer says what the pair did."""

    marker: tuple[str, Append] | None = None


class Store(_Write):
    """Append the outcome; then tell the core `stored`."""

    __slots__ = ()


class StoreStep(_Write):
    """Append the outcome of a segment's step that is not its last (with the next step's claim,
    one store: a refused claim's fence sends it alone, `LogWriter._send_lane`); nothing to tell
    the core once stored: the next claim's answer says what the batch did (docs/decisions/0058)."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Read:
    """Read what the log holds of these steps of a segment (each step's claims and outcomes, every
    provisioner's), then tell the core `read` the outcomes of its attempt found, in order, up to
    the first step without one: a segment delivered again starts after its last success
    (docs/decisions/0058)."""

    held: int
    steps: tuple[TaskStep, ...]


@dataclass(frozen=True, slots=True)
class Run:
    """Run the task's plugin; then tell the core `ran`."""

    held: int
    task: TaskMessage


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop the task's plugin, started by `Run`, at once (the core has let the delivery go:
    its lease lapsed, `WorkerCore.lease_lapsed`); `ran` is not to be told."""

    held: int


@dataclass(frozen=True, slots=True)
class Answer:
    """Settle the delivery whose reply subject this is."""

    reply: str
    settle: Settle


@dataclass(frozen=True, slots=True)
class Note:
    """Something for the operator's log."""

    level: Literal["info", "warning", "error"]
    what: str
    fields: dict[str, Any]


Action = Claim | Run | Stop | Store | StoreStep | Read | Answer | Note
