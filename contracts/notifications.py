"""Notifications (docs/governance.md): what the notifier owes each subscription and every attempt
to deliver it, on `muster.evt.<tenant>.notify.<subscription>`, written by the notifier alone.

`NotificationQueued` is recorded before the event that caused it is acknowledged, so a notifier
that dies owes it still when it starts again; each delivery attempt is a `NotificationAttempted`
(the last one `final`: delivered, given up, or no longer true). A notification's id is derived
from the subscription and the log sequence of its cause: recorded twice, it is one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from .base import Event
from .governance import NotificationKind


class NotificationQueued(Event):
    type: Literal["NotificationQueued"] = "NotificationQueued"
    v: Literal[1] = 1
    id: str
    subscription: str
    kind: NotificationKind | Literal["test"]
    cause_seq: int = Field(ge=0, description="the log sequence of the event it tells of (0: a test)")
    due_at: datetime = Field(description="when to send it (a lease warning: some time before the lease ends)")
    body: dict[str, Any] = Field(description="what the receiver is told (the muster format; Slack's is made from it)")


class NotificationAttempted(Event):
    type: Literal["NotificationAttempted"] = "NotificationAttempted"
    v: Literal[1] = 1
    id: str
    attempt: int = Field(ge=1)
    ok: bool
    status: int | None = Field(default=None, description="the receiver's HTTP status")
    error: str = ""
    final: bool = Field(description="no attempt follows: delivered, given up, or dropped")
    next_at: datetime | None = Field(default=None, description="when the next attempt is due")


NOTIFICATION_EVENTS: tuple[type[Event], ...] = (NotificationQueued, NotificationAttempted)
