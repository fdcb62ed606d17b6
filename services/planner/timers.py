"""Timers: named deadlines, each firing its kind's handler once, under no loop that polls.

A timer is a key `(kind, *ids)` and a deadline. Deadlines are derived from times in the log
(an attempt's `TaskQueued` time plus the task timeout), so a restarted planner re-arms every
timer from the log (`Planner.resume`). A new kind (a lease's expiry, a saved plan's start)
registers its handler with `on` and is re-armed the same way from its own logged times.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from muster.ports.clock import Cancellable, Clock

TimerKey = tuple[Any, ...]


class Timers:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.handles: dict[TimerKey, Cancellable] = {}
        self._handlers: dict[str, Callable[..., Awaitable[None]]] = {}

    def on(self, kind: str, handler: Callable[..., Awaitable[None]]) -> None:
        """`handler(*ids)` runs when a timer of `kind` falls due."""
        self._handlers[kind] = handler

    def arm(self, key: TimerKey, at: datetime) -> bool:
        """Arm `key` for `at`; False if it is armed already (the first deadline holds)."""
        if key in self.handles:
            return False

        async def fire() -> None:
            if self.handles.get(key) is handle:  # not disarmed (nor re-armed) meanwhile
                del self.handles[key]
                await self._handlers[key[0]](*key[1:])

        handle = self.handles[key] = self.clock.call_at(at, fire)
        return True

    def disarm(self, key: TimerKey) -> None:
        handle = self.handles.pop(key, None)
        if handle is not None:
            handle.cancel()

    def armed(self, kind: str) -> list[TimerKey]:
        return [k for k in self.handles if k[0] == kind]

    def cancel_all(self) -> None:
        for handle in self.handles.values():
            handle.cancel()
        self.handles.clear()
