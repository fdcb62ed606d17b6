"""Large jobs folded once and kept for the next page or stream (bigjob.py).

Reading a 10,000-node job's history is seconds of work (its plan alone is one event of 20 MB),
so the fold of the large job viewed last is kept (one only: a fold holds a record per task;
docs/ui.md, "Large jobs"), as the tracker keeps a job's task locations (tasks.py): the next
request reads only the events the log added since, up to the log's end at that moment (pinned,
so nothing of a filter read first can be missing). Streams feed the same fold with what they
receive; `JobFold.add` skips what it holds already, so the readers may overlap in any order.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence

from contracts import subjects
from contracts.records import Recorded, Undecodable

from ..app import Tracker
from .bigjob import BIG, JobFold

KEPT_JOBS = 1


class JobFolds:
    def __init__(self, kept: int = KEPT_JOBS) -> None:
        self.kept = kept
        self._jobs: OrderedDict[tuple[str, str], JobFold] = OrderedDict()
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    def peek(self, tenant: str, job_id: str) -> JobFold | None:
        return self._jobs.get((tenant, job_id))

    def keep(self, tenant: str, job_id: str, history: Sequence[Recorded]) -> JobFold:
        """A fold of a history just read (the page found the job large)."""
        fold = JobFold()
        for r in history:
            if not isinstance(r.event, Undecodable):  # (named by the reads that show the log)
                fold.add(r)
        self._put((tenant, job_id), fold)
        return fold

    async def get(self, tracker: Tracker, tenant: str, job_id: str) -> JobFold:
        """The job's fold, up to date with the log now (kept if the job is large)."""
        key = (tenant, job_id)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            fold = self._jobs.get(key) or JobFold()
            end = (await tracker.nc.jetstream().stream_info(subjects.EVENTS_STREAM)).state.last_seq
            if end > fold.seq:
                merged: dict[int, Recorded] = {}
                for f in subjects.job_history_filters(tenant, job_id):
                    for r in await tracker.store.read(f, start_seq=fold.seq + 1, up_to_seq=end):
                        merged[r.seq] = r
                for seq in sorted(merged):
                    if not isinstance(merged[seq].event, Undecodable):
                        fold.add(merged[seq])
                fold.seq = max(fold.seq, end)
            if fold.size > BIG:
                self._put(key, fold)
            else:  # a small job's is cheap to read again (its stream folds its own)
                self._jobs.pop(key, None)
        self._locks = {k: held for k, held in self._locks.items() if k in self._jobs or held.locked()}
        return fold

    def _put(self, key: tuple[str, str], fold: JobFold) -> None:
        self._jobs.pop(key, None)
        self._jobs[key] = fold
        while len(self._jobs) > self.kept:
            self._jobs.popitem(last=False)
