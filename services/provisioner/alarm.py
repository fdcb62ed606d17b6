"""One timer on the running loop for the worker core's next deadline: set again only when asked
for an earlier time, so the core's many deadlines cost one timer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Alarm:
    def __init__(self, ring: Callable[[], None]) -> None:
        self.ring = ring
        self._timer: asyncio.TimerHandle | None = None
        self._at = 0.0

    def at(self, due: float | None) -> None:
        """Ring at `due` (loop time), unless it is set to ring earlier; None: nothing is due."""
        if due is not None and (self._timer is None or due < self._at):
            if self._timer is not None:
                self._timer.cancel()
            self._timer, self._at = asyncio.get_running_loop().call_at(due, self._rang), due

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _rang(self) -> None:
        self._timer = None
        self.ring()
