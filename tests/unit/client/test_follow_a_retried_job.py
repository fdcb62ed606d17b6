"""`muster job wait` on a job that was retried: its end is the last one, not the first read."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

from contracts.events import JobRequested, JobRetried, JobRolledBack, JobSucceeded
from contracts.records import Recorded
from muster.ops_session import follow

JOB, CLUSTER = "0b7f3b59-4b38-5d0f-9a53-6f8a1f0e6c11", "6d0e0c59-7c0a-5a43-8e0c-2f2d7f0a1b22"


async def _story() -> AsyncIterator[Recorded]:
    """A create rolled back, then retried and succeeding: the tracker sends it whole, then ends."""
    for seq, event in enumerate([
        JobRequested(tenant="default", job_id=JOB, cluster_id=CLUSTER, operation="create", request={}),
        JobRolledBack(job_id=JOB, reason="task n1001.create failed 3 times: simulated failure"),
        JobRetried(job_id=JOB, by="root"),
        JobSucceeded(job_id=JOB),
    ], start=1):
        yield Recorded(seq, f"muster.evt.default.job.{JOB}", datetime.now(UTC), event)


async def test_a_retried_job_ends_with_its_last_end() -> None:
    followed = await follow(_story(), JOB, "wait", {"JobSucceeded", "JobRolledBack", "JobFailed", "JobNeedsAttention"},
                            timeout=10, quiet=True, to_the_end=True)
    assert followed.final.type == "JobSucceeded", followed.final
