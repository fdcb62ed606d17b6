"""When the claims a provisioner's earlier processes made on a tenant are known to have stopped
(pure; docs/decisions/0054).

A process started again under a provisioner's id (a new *session*) registers on each tenant's
log before it claims, so every claim before its registration is an earlier session's. Each
earlier session renews its presence record no more once a later one wrote it, so its lease
lapses within its own TTL of that write, and that write was before the planner saw the later
session's record (or before the planner first looked). The planner's watch of the bucket
(`Sessions`, services/planner/adapters.py) knows the TTLs of the records it saw; a session
replaced before the planner first saw the id it never saw, and its TTL is the one its
registration carries (`ProvisionerRegistered.ttl_s`, v2). A registration without a TTL (an
older provisioner's) says nothing: it is left to the watch, as before the TTL was registered. A
session that deregistered had drained first: it runs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Registered:
    seq: int
    """Its log sequence."""
    session: str
    ttl_s: float | None
    """None: an older provisioner's registration, its TTL not known."""


@dataclass(frozen=True)
class Deregistered:
    session: str


@dataclass(frozen=True)
class Stopped:
    since: int
    """The claims before this log sequence are earlier sessions' (`session`'s registration);
    0: it did not register on this log (or none was named)."""
    at: float
    """From when those earlier sessions are known to have stopped, on the clock of `seen_at`."""


def earlier_stopped(history: Sequence[Registered | Deregistered], session: str | None, seen_at: float) -> Stopped:
    """On one tenant's log of a provisioner id (`history`, in log order), the sessions before
    `session` (every one registered here, when it is None or did not register here): since
    which sequence their claims end, and from when, given a time by which each of them had been
    replaced (`seen_at`: when the planner saw `session`'s record, or first looked)."""
    mine = next((r.seq for r in history if isinstance(r, Registered) and r.session == session), 0)
    left = {r.session for r in history if isinstance(r, Deregistered)}
    ttls = [r.ttl_s for r in history if isinstance(r, Registered) and (not mine or r.seq < mine)
            and r.session != session and r.session not in left and r.ttl_s is not None]
    return Stopped(mine, seen_at + max(ttls, default=0.0))
