"""A save whose answer was lost must not let the next save leave a hole in the versions.

Found by the loopback cluster's leader-kill test: a planner's save timed out during a failover,
its events were taken out of the job but never stored, and the next save, fenced on the old
sequence, landed version 20 after version 17; no fold gets past such a log.
"""

from __future__ import annotations

import asyncio

import pytest

from contracts import subjects
from muster.bus.repository import Repository, rebuild
from muster.ports.eventlog import ConcurrencyError
from muster.ports.memory import MemoryEventLog
from services.planner.domain.cluster import Cluster
from services.planner.domain.job import Job
from services.planner.state import PlannerState

from .histories import new_cluster, new_job


def _subject(job: Job) -> str:
    return subjects.job_events(job.tenant, str(job.id))


async def _saved_job(repo: Repository) -> Job:
    job = new_job(1)
    await repo.save(job, _subject(job))
    return job


def test_a_save_after_a_lost_save_is_refused_and_the_log_keeps_whole_versions() -> None:
    async def run() -> None:
        log = MemoryEventLog()
        repo = Repository(log)
        job = await _saved_job(repo)
        stored = len(log.records)
        log.inject(lambda s, items: True, TimeoutError("the stream leader died"))
        job.pause("someone", "r1")
        with pytest.raises(TimeoutError):
            await repo.save(job, _subject(job))
        job.resume("someone", "r2")  # the next decision, made on the copy that lost its events
        with pytest.raises(ConcurrencyError, match="never stored"):
            await repo.save(job, _subject(job))
        assert len(log.records) == stored  # nothing after the hole
        reloaded = await repo.load(Job, _subject(job))
        assert reloaded is not None and reloaded.version == job.version - 2
        reloaded.pause("someone", "r3")
        await repo.save(reloaded, _subject(job))  # the log's view saves again
        again = rebuild(Job, await log.read(_subject(job)))
        assert again is not None and again.version == reloaded.version and again.paused

    asyncio.run(run())


def test_a_save_whose_ack_was_lost_is_not_refused_once_the_view_is_taken_again() -> None:
    async def run() -> None:
        log = MemoryEventLog()
        state = PlannerState(log, catalogs=None)  # type: ignore[arg-type]
        job = await _saved_job(state.repo)
        state.jobs[str(job.id)] = job
        log.inject(lambda s, items: True, TimeoutError("ack lost"), lands=True)
        job.pause("someone", "r1")
        with pytest.raises(TimeoutError):
            await state.save_job(job)
        fresh = state.jobs[str(job.id)]
        assert fresh is not job and fresh.paused  # it landed, and the planner took the log's view
        fresh.resume("someone", "r2")
        await state.save_job(fresh)
        folded = rebuild(Job, await log.read(_subject(job)))
        assert folded is not None and folded.version == fresh.version and not folded.paused

    asyncio.run(run())


def test_when_the_log_cannot_be_read_either_the_stale_copy_is_never_saved() -> None:
    async def run() -> None:
        log = MemoryEventLog()
        state = PlannerState(log, catalogs=None)  # type: ignore[arg-type]
        job = await _saved_job(state.repo)
        state.jobs[str(job.id)] = job
        log.inject(lambda s, items: True, TimeoutError("no answer"))
        real_read = log.read

        async def failing_read(*args: object, **kwargs: object) -> list[object]:
            raise TimeoutError("no leader")

        log.read = failing_read  # type: ignore[method-assign, assignment]
        job.pause("someone", "r1")
        with pytest.raises(TimeoutError):
            await state.save_job(job)
        assert state.jobs[str(job.id)] is job  # could not be replaced
        job.resume("someone", "r2")
        with pytest.raises(ConcurrencyError):
            await state.save_job(job)
        log.read = real_read  # type: ignore[method-assign]
        job.pause("someone", "r3")
        with pytest.raises(ConcurrencyError):
            await state.save_job(job)  # refused again, and this time the log's view is taken
        fresh = state.jobs[str(job.id)]
        assert fresh is not job and not fresh.paused
        assert rebuild(Job, await log.read(_subject(job))) is not None

    asyncio.run(run())


def test_a_new_aggregate_saves_and_a_cluster_is_fenced_too() -> None:
    async def run() -> None:
        log = MemoryEventLog()
        repo = Repository(log)
        cluster = new_cluster(1)
        subject = subjects.cluster_events(cluster.tenant, str(cluster.id))
        await repo.save(cluster, subject)
        log.inject(lambda s, items: True, TimeoutError("lost"))
        cluster.set_status("active", "job-1")
        with pytest.raises(TimeoutError):
            await repo.save(cluster, subject)
        cluster.set_status("deleting", "job-2")
        with pytest.raises(ConcurrencyError):
            await repo.save_chain([(cluster, subject)])
        assert rebuild(Cluster, await log.read(subject)) is not None

    asyncio.run(run())
