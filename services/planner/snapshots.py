"""The planner's aggregates as snapshot kinds (`muster.snapshots`), and the writer that keeps
their snapshots fresh, off the request path.

After every save the aggregate is noted; a cluster with `every` events or more since its last
snapshot, or a job that just ended (a running job's snapshot would not be read), is
snapshotted by a background task, from the state the log has acknowledged (never from a state
whose save is still on its way: the task checks the version the last save left, and skips the
aggregate until its next save otherwise). A snapshot
that cannot be written is only a missed shortcut: the next one will do.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from muster import snapshots
from muster.bus.repository import log_seq
from muster.snapshots import Kind, SnapshotError, SnapshotSource, SnapshotTooLarge

from .domain.cluster import Cluster
from .domain.job import Job

log = structlog.get_logger("muster.planner")

CLUSTER = snapshots.register("cluster", Cluster)
JOB = snapshots.register("job", Job, derived={"_plans": dict, "_dispatch": lambda: None})
MOST_TASKS = 4000
"""A job with more tasks has a snapshot larger than the store takes (compressed, about 28
bytes a task against 44 KB: docs/planner.md, "Snapshots"), so none is tried."""
EVERY = 100
"""Events of an aggregate between two of its snapshots."""


class Snapshotter:
    def __init__(self, store: SnapshotSource, every: int = EVERY) -> None:
        self.store, self.every = store, every
        self.written = 0
        self._taken: dict[str, int] = {}  # aggregate id -> version of its last snapshot
        self._committed: dict[str, tuple[int, int]] = {}  # aggregate id -> (version, seq) the log holds
        self._due: dict[str, tuple[Kind, Any, str]] = {}
        self._writing: asyncio.Task[None] | None = None
        self._refused: set[str] = set()
        self._too_large: set[str] = set()  # aggregate ids whose snapshot the store refused for its size

    def loaded(self, kind: Kind, aggregate: Any, tenant: str, snapshot_version: int = 0, *, refresh: bool = False) -> None:
        """`aggregate` is the log's state (resumed from a snapshot of `snapshot_version`, or 0).
        `refresh`: snapshot it if any event follows its snapshot (the next resume then reads
        nothing of it while it stays quiet, however long the log grows meanwhile)."""
        if snapshot_version:
            self._taken[str(aggregate.id)] = snapshot_version
        self.saved(kind, aggregate, tenant, refresh=refresh)

    def saved(self, kind: Kind, aggregate: Any, tenant: str, *, refresh: bool = False) -> None:
        """The log has every event of `aggregate` (just saved or loaded)."""
        key = str(aggregate.id)
        self._committed[key] = (aggregate.version, log_seq(aggregate))
        if key in self._too_large:
            return  # it only grows: it resumes from its events
        if isinstance(aggregate, Job) and len(aggregate.tasks) > MOST_TASKS:
            self._too_large.add(key)  # known without encoding it (a big job takes far more memory to find out)
            return
        if getattr(aggregate, "is_final", None) is False:
            # A job that has not ended resumes from its whole history (its open tasks' times
            # are in it), so a snapshot of it would never be read; writing one every `every`
            # events cost a job of N tasks O(N) a task (each encodes the whole job).
            return
        behind = aggregate.version - self._taken.get(key, 0)
        if behind >= self.every or (behind > 0 and (refresh or getattr(aggregate, "is_final", False))):
            self._due[key] = (kind, aggregate, tenant)
            if self._writing is None or self._writing.done():
                self._writing = asyncio.get_running_loop().create_task(self._write())

    async def _write(self) -> None:
        while self._due:
            key, (kind, aggregate, tenant) = self._due.popitem()
            version, seq = self._committed.get(key, (-1, -1))
            if aggregate.version != version or log_seq(aggregate) != seq or aggregate._pending_events:
                continue  # changed since its save: that save's successor asks again
            try:
                data = snapshots.take(kind, aggregate, tenant, seq)
            except SnapshotError as err:
                if kind.name not in self._refused:  # a bug in the aggregate, said once
                    self._refused.add(kind.name)
                    log.error("aggregate cannot be snapshotted", kind=kind.name, error=str(err))
                continue
            try:
                await self.store.put(kind.name, tenant, key, data)
            except SnapshotTooLarge as err:
                self._too_large.add(key)
                log.warning("snapshot too large; the aggregate resumes from its events", kind=kind.name, id=key, error=str(err))
                continue
            except Exception as err:  # noqa: BLE001 - a missed snapshot only costs a longer resume
                log.warning("snapshot not written", kind=kind.name, id=key, error=str(err) or type(err).__name__)
                continue
            self._taken[key] = version
            self.written += 1

    async def idle(self) -> None:
        """Wait until every due snapshot is written (tests, benchmarks, a clean stop)."""
        while self._writing is not None and not self._writing.done():
            await asyncio.shield(self._writing)

    def close(self) -> None:
        if self._writing is not None:
            self._writing.cancel()
