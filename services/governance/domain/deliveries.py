"""A subscription's latest news, for people (pure): the last event on its notification subject
(`muster.evt.<tenant>.notify.<name>`), so that `muster notify list`, the tracker and the console
say whether its deliveries go through, and why not, without a reader of the log."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from contracts.notifications import NotificationAttempted, NotificationQueued
from muster.times import shown_time

_TEST = re.compile(r"-test-[0-9a-f]{12}$")
"""A test notification's id (`services/notifier/requests.py`); a real one ends with its event's kind."""


def latest(event: Any, at: datetime) -> dict[str, Any] | None:
    """`state`: `queued` (not tried yet), `delivered`, `failing` (tried again at `next_at`) or
    `undelivered` (the last attempt: given up, refused, or no longer true); None: not a notification."""
    if isinstance(event, NotificationQueued):
        return {"state": "queued", "id": event.id, "kind": event.kind, "at": at.isoformat(), "due_at": event.due_at.isoformat()}
    if isinstance(event, NotificationAttempted):
        state = "delivered" if event.ok else "undelivered" if event.final else "failing"
        # `test`: a `muster notify test`, tried once: its failure is not the real notifications' (still retried)
        return {"state": state, "id": event.id, "at": at.isoformat(), "attempt": event.attempt, "status": event.status,
                "error": event.error, "next_at": event.next_at.isoformat() if event.next_at else None,
                "test": bool(_TEST.search(event.id))}
    return None


def said(delivery: dict[str, Any] | None) -> str:
    """One line: `delivered at … (HTTP 204)`, `failing: <error> (attempt 2; next at …)`."""
    if not delivery:
        return "-"
    state, at = delivery["state"], shown_time(delivery["at"])  # as people read times (it cut ISO 8601 short)
    if state == "queued":
        return f"queued {delivery.get('kind')} (due at {shown_time(delivery['due_at'])})"
    status = f"HTTP {delivery['status']}" if delivery.get("status") else ""
    test = "test " if delivery.get("test") else ""  # (a test's delivery is no notification's: it said `delivered` alike)
    if state == "delivered":
        return f"{test}delivered at {at}" + (f" ({status})" if status else "")
    tail = f"; next at {shown_time(delivery['next_at'])}" if delivery.get("next_at") else ""
    return f"{test}{state} at {at}: {delivery.get('error') or status or 'no answer'} (attempt {delivery.get('attempt')}{tail})"
