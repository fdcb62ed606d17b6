"""The provisioner's routing tables: what it listens to, in one place.

A provisioner consumes no event of the log. Its inputs are:

- **task messages** on the `TASKS` stream, `muster.task.<tenant>.<class>`, pulled through one
  durable consumer per (tenant, class) (`subjects.task_consumer`), shared by every provisioner
  that serves it; `Workers` (worker.py) runs each through the plugin its action names (create,
  confirm, delete: the provider plugin; the other actions: an automator plugin);
- **requests** (`REPLIES`): the subjects it answers, each with the `Provisioner` method that
  answers.

What it writes (`TaskClaimed`, `TaskSucceeded`, `TaskFailed`, `ProvisionerRegistered`,
`ProvisionerDeregistered`) and who consumes it: docs/bus.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from contracts import subjects


def drain_subject(provisioner_id: str) -> str:
    return subjects.provisioner_drain(provisioner_id)


def held_subject(provisioner_id: str) -> str:
    return subjects.provisioner_held(provisioner_id)


@dataclass(frozen=True)
class Reply:
    subject: Callable[[str], str]
    """The provisioner's id -> the subject it answers on."""
    handler: str
    """The name of the `Provisioner` method that answers."""


REPLIES = (
    Reply(drain_subject, "on_drain_request"),
    Reply(held_subject, "on_held_request"),
)
