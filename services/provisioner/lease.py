"""A provisioner's lease: how long its presence record is sure to be in the bucket.

Every presence write carries the record's TTL and the server counts it from when it stores the
write, which is after it was sent. So a write acknowledged gives the provisioner, on its own
clock, until `sent + ttl` during which its record is there; the lease ends a margin before
(`MARGIN`, a fifth of the TTL: clocks that run at slightly different rates, a timer that
fires late). When no write was acknowledged in time the lease *lapses*: the provisioner stops
the forward attempts it runs (`WorkerCore.lease_lapsed`), so that once the server expires the
record, a planner can take every claim of this provisioner's as lost (docs/decisions/0054).
A later acknowledged write starts a new term; nothing claimed in a lapsed one runs again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

MARGIN = 0.2
"""Of the TTL: the lease ends this much before the record may expire."""


class Lease:
    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = float(ttl_s)
        self.until = float("-inf")
        """Loop time up to which the record is sure to be there (less the margin)."""
        self._timer: asyncio.TimerHandle | None = None
        self._on_renewed: list[Callable[[], None]] = []
        self._on_lapsed: list[Callable[[], None]] = []

    def follow(self, renewed: Callable[[], None], lapsed: Callable[[], None]) -> None:
        self._on_renewed.append(renewed)
        self._on_lapsed.append(lapsed)

    @property
    def held(self) -> bool:
        return asyncio.get_running_loop().time() < self.until

    def renewed(self, sent_at: float) -> None:
        """A record written at `sent_at` (loop time, taken before the write was sent) was
        acknowledged. An acknowledgement that came after its own lease would have ended renews
        nothing (the record may be gone already)."""
        loop = asyncio.get_running_loop()
        until = sent_at + self.ttl_s * (1 - MARGIN)
        if until <= loop.time() or until <= self.until:
            return
        self.until = until
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(until, self._lapse)
        for renewed in self._on_renewed:
            renewed()

    def stop(self) -> None:
        """No more lapses (the provisioner stops: its workers are done or abandoned)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _lapse(self) -> None:
        self._timer = None
        for lapsed in self._on_lapsed:
            lapsed()
