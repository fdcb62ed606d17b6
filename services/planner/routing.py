"""The planner's routing tables: every input it has, in one place.

- `ROUTES`: which durable consumer feeds which handler, per event type. `grep` an event's name
  here to see what the planner does with it. Events on a consumer's subjects that the table
  does not name (the planner's own `LayoutRequested`) are acknowledged and ignored; one that
  cannot be taken in however often it is tried goes to `POISON`. docs/bus.md lists every
  event's producer and consumers.
- `REPLIES`: the request/reply subjects it answers, each with its answer (`replies.Replies`);
  `SHARD_REPLY`: the subject of each shard it holds, where other planners forward requests
  for that shard's clusters (`sharding.Sharding`).
- `POOL_FOLD`: the live fold of the pools (`services.pool.mirror`), every pool event after
  it is folded.
- `BUDGETS`: a concurrency limit's budget that another planner changed (`muster.bus.budgets`).
- `TIMERS`: each kind of timer (`timers.py`) and the handler it fires.
- `QUEUE_RESETS`: the task queue found empty after a restart (docs/decisions/0013).
- `PROVISIONER_GONE`: a provisioner's presence record expired or was deleted (the presence
  bucket's watch; docs/decisions/0054).

Handlers and answers are names of the planner's methods (`app.Planner`), the answers'
(`replies.Replies`) or the shards' (`sharding.Sharding`), resolved where the inputs are
subscribed (`entrypoint.py`, the unit tests' harness); ownership of the input's cluster is
asked there once, before the handler's own work (`Planner._owned`).
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts import subjects
from muster.routing import Route

ROUTES = (
    Route("planner-layouts", subjects.ALL_LAYOUT_EVENTS, {
        "LayoutSolved": "on_layout_answer",
        "LayoutUnsolvable": "on_layout_answer",
    }),
    # Not ALL_TASK_EVENTS: running attempts' progress lines (a token longer) never reach a planner.
    Route("planner-tasks", subjects.ALL_TASK_OUTCOMES, {
        "TaskClaimed": "on_task_claimed",
        "TaskSucceeded": "on_task_outcome",
        "TaskFailed": "on_task_outcome",
    }, batch="on_task_events"),
)
POISON = "on_poison"


@dataclass(frozen=True)
class Reply:
    subject: str
    answer: str
    """The method that answers: it takes the subject and the body, returns the reply's body."""
    queue: str = ""
    """A queue group: one planner of the group answers each request."""
    concurrent: bool = False
    """Each request answered in a task of its own (`replies.Responders`)."""


REPLIES = (
    Reply(subjects.PLANNER_METRICS, "metrics"),
    Reply(f"{subjects.OPS}.*.*.*", "operation", queue="planners", concurrent=True),
    Reply(subjects.ALL_JOB_QUERIES, "job_query"),
    # (each planner hears it; the one acting for the job answers, reading the log: decision 58)
    Reply(subjects.ALL_STEP_OUTCOMES, "step_outcomes", concurrent=True),
)
SHARD_REPLY = Reply(f"{subjects.SHARD}.{{shard}}.ops.*.*.*", "forwarded")
"""Subscribed for each shard gained (`{shard}`: its number), dropped when it is lost."""

POOL_FOLD = "on_pool_event"
BUDGETS = "on_budget_change"

TIMERS = {
    "timeout": "task_timed_out",
    "republish": "republish",
    "unsent": "send_unsent",
    "claims": "close_claims",
    "requeue": "requeue_lost",
    "lease": "lease_expired",
    "approval": "approval_expired",
    "budget": "budget_retry",
}
"""Each kind of timer (a key `(kind, *ids)` and a deadline) -> the handler that takes it when it
falls due, with the key's ids."""

QUEUE_RESETS = "queue_lost"
PROVISIONER_GONE = "provisioner_gone"
