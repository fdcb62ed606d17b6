"""Timers: named deadlines, each firing its kind's handler once, under no loop that polls.

A timer is a key `(kind, *ids)` and a deadline. Deadlines are derived from times in the log
(an attempt's `TaskQueued` time plus the task timeout), so a restarted planner re-arms every
timer from the log (`Planner.resume`). A new kind (a lease's expiry, a saved plan's start)
registers its handler with `on` and is re-armed the same way from its own logged times.

Keys armed for the same deadline share one call of the clock (`_Due`): a wave of tasks arms
its thousands of timeouts for one deadline, and disarms nearly all of them as their outcomes
come; a call of the event loop each cost the planner more than the rest of a task's timer
work together (docs/benchmarks.md, "Scale: the planner's CPU a task", session 29). Each key
still fires in a call of its own, as when it had its own timer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from functools import partial
from typing import Any

from muster.ports.clock import Cancellable, Clock

TimerKey = tuple[Any, ...]


class _Due:
    """The keys armed for one deadline, and the clock's call that fires them."""

    __slots__ = ("at", "call", "keys")

    def __init__(self, at: datetime) -> None:
        self.at = at
        self.keys: dict[TimerKey, None] = {}  # (a dict: they fire in the order they were armed)
        self.call: Cancellable | None = None


class Timers:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.handles: dict[TimerKey, _Due] = {}
        """Every armed key, with its deadline's group."""
        self._due: dict[datetime, _Due] = {}
        self._handlers: dict[str, Callable[..., Awaitable[None]]] = {}

    def on(self, kind: str, handler: Callable[..., Awaitable[None]]) -> None:
        """`handler(*ids)` runs when a timer of `kind` falls due."""
        self._handlers[kind] = handler

    def arm(self, key: TimerKey, at: datetime) -> bool:
        """Arm `key` for `at`; False if it is armed already (the first deadline holds)."""
        if key in self.handles:
            return False
        due = self._due.get(at)
        if due is None:
            due = self._due[at] = _Due(at)

            async def fire() -> None:
                if self._due.get(at) is due:
                    del self._due[at]
                for k in list(due.keys):  # each in a call of its own, as a timer of its own did
                    self.clock.call_at(at, partial(self._fire, k, due))

            due.call = self.clock.call_at(at, fire)
        due.keys[key] = None
        self.handles[key] = due
        return True

    async def _fire(self, key: TimerKey, due: _Due) -> None:
        if self.handles.get(key) is due:  # not disarmed (nor re-armed) meanwhile
            del self.handles[key]
            await self._handlers[key[0]](*key[1:])

    def disarm(self, key: TimerKey) -> None:
        due = self.handles.pop(key, None)
        if due is None:
            return
        due.keys.pop(key, None)
        if not due.keys and self._due.get(due.at) is due:  # the last of its deadline: no call left to make
            del self._due[due.at]
            if due.call is not None:
                due.call.cancel()

    def postpone(self, key: TimerKey, at: datetime) -> bool:
        """Move an armed `key` to `at` when that is later; False if it is not armed, or due sooner."""
        due = self.handles.get(key)
        if due is None or due.at >= at:
            return False
        self.disarm(key)
        return self.arm(key, at)

    def armed(self, kind: str) -> list[TimerKey]:
        return [k for k in self.handles if k[0] == kind]

    def cancel_all(self) -> None:
        for due in self._due.values():
            if due.call is not None:
                due.call.cancel()
        self._due.clear()
        self.handles.clear()
