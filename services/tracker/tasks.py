"""Where a job's tasks run, derived from the log when asked (not kept in the location index).

A task's location is what its latest events say: its `TaskQueued` (node, action) on the job's
subject, then the claims and outcomes its provisioners wrote on `task.<job>.<task>.<provisioner>`.
The index kept a record per task, written three times per task by every tracker's consumer (a
compare-and-set each, and every tracker's mirror receiving each write): most of the bus's
messages and the tracker's memory for a big job, for an answer the log already holds. Now a
job's task records are folded from those subjects when someone asks, and kept for the next
question: the next one reads only the events after the last one it folded. The few most recent
jobs are kept, and no more records than `KEPT_RECORDS` in all (a job of 10,000 nodes has about
eleven records a node; docs/benchmarks.md has their memory): the job asked last is kept
whatever its size.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from contracts import subjects
from contracts.records import Recorded
from muster.ports.eventlog import EventLog
from muster.readmodel.locations import Record
from muster.readmodel.status import task_records

KEPT_JOBS = 4
KEPT_RECORDS = 150_000


class TaskLocations:
    def __init__(self, store: EventLog, kept: int = KEPT_JOBS, kept_records: int = KEPT_RECORDS) -> None:
        self.store = store
        self.kept = kept
        self.kept_records = kept_records
        self._jobs: OrderedDict[tuple[str, str], tuple[int, dict[str, Record]]] = OrderedDict()

    async def of(self, tenant: str, job_id: str, with_queued: bool = True) -> dict[str, Record]:
        """The job's task records by task id, up to date with the log now. `with_queued`: the
        job's own subject too (a task's node and its queued attempts); without it only claims
        and outcomes (where a task runs) are read."""
        key = (tenant, job_id) if with_queued else (tenant, f"{job_id}/runs")
        last, records = self._jobs.pop(key, (0, {}))
        filters = [subjects.job_task_events(tenant, job_id)]
        if with_queued:
            filters[:0] = subjects.job_filters(tenant, job_id)
        fresh, last = await self._read(filters, last)
        if fresh:
            records = task_records(fresh, records)
        self._jobs[key] = (last, records)
        held = sum(len(r) for _, r in self._jobs.values())
        while len(self._jobs) > 1 and (len(self._jobs) > self.kept or held > self.kept_records):
            held -= len(self._jobs.popitem(last=False)[1][1])
        return records

    @property
    def held(self) -> tuple[int, int]:
        """(jobs, task records) kept now."""
        return len(self._jobs), sum(len(r) for _, r in self._jobs.values())

    async def _read(self, filters: Sequence[str], last: int) -> tuple[list[Recorded], int]:
        """The events after `last`, and how far the next read may start: up to the newest of
        the first filter's (every later filter was read after it, so nothing of theirs up to
        there can be missed). Events past that are read again next time, which a merge by
        version makes harmless."""
        merged: list[Recorded] = []
        upto = last
        for i, subject_filter in enumerate(filters):
            got = await self.store.read(subject_filter, start_seq=last + 1)
            if i == 0 and got:
                upto = got[-1].seq
            merged += got
        if len(filters) == 1:
            upto = max(upto, *(r.seq for r in merged)) if merged else upto
        return sorted(merged, key=lambda r: r.seq), upto
