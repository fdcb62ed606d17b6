"""The clock port: the time now, and a call at a given time.

Timeouts are deadlines (a logged time plus a limit), so a restarted service re-arms them from
the log; nothing polls. `AsyncioClock` is the real one; `muster.ports.memory.ManualClock` moves
only when a test says so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, Protocol

Call = Callable[[], Coroutine[Any, Any, Any]]


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> datetime: ...

    def call_at(self, when: datetime, call: Call) -> Cancellable:
        """Run `call` (a coroutine function) at `when`, or at once if `when` has passed."""
        ...


class AsyncioClock:
    """Wall time and the running event loop."""

    def __init__(self) -> None:
        self._running: set[asyncio.Task[Any]] = set()  # strong references until done

    def now(self) -> datetime:
        return datetime.now(UTC)

    def call_at(self, when: datetime, call: Call) -> asyncio.TimerHandle:
        loop = asyncio.get_running_loop()

        def fire() -> None:
            task = loop.create_task(call())
            self._running.add(task)
            task.add_done_callback(self._running.discard)

        return loop.call_later(max(0.0, (when - self.now()).total_seconds()), fire)
