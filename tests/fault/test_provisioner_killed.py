"""Scenario 1: kill -9 a provisioner mid-task; the task runs again on the other, the job succeeds."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts import subjects
from contracts.commands import Accepted, CreateCluster
from contracts.events import JobSucceeded
from muster.bus.eventstore import EventStore

from .harness import FaultStack, demo_catalog

pytestmark = [pytest.mark.fault, pytest.mark.timeout(120)]


async def test_a_task_whose_provisioner_dies_completes_on_another(tmp_path: Path) -> None:
    async with await FaultStack.single(tmp_path, provisioners=2) as fs:
        # Creates take 1.5 s, so the victim is surely mid-task when it dies.
        await fs.load_catalog("default", demo_catalog(latency_ms="20-80", latency_ms_create="1500"))
        replies: list[Accepted] = []
        create = fs.sending("default", CreateCluster(name="victim", template="hadoop-small", nodes=3), replies)
        claim = await fs.when(
            "muster.evt.default.task.>",
            lambda r: r.type == "TaskClaimed" and r.event.provisioner == "prov-1" and r.event.task_id.endswith(".create"),
            create,
        )
        pid = await fs.kill("provisioner-1")
        job = replies[0].job_id
        final = await fs.client.wait(job, timeout=60)
        assert isinstance(final, JobSucceeded), final

        # The task prov-1 died holding ran again, same attempt, on prov-2.
        task = claim.event.task_id
        events = await EventStore(fs.conn).read(subjects.task_history_filter("default", job, task))
        claims = [(r.event.provisioner, r.event.attempt, r.event.delivery) for r in events if r.type == "TaskClaimed"]
        done = [(r.event.provisioner, r.event.attempt) for r in events if r.type == "TaskSucceeded"]
        assert ("prov-1", claim.event.attempt, claim.event.delivery) in claims, claims
        assert done == [("prov-2", claim.event.attempt)], (done, claims)
        print(f"\n[scenario 1] killed prov-1 (pid {pid}) holding {task} attempt {claim.event.attempt}; claims {claims}")

        report = await fs.check()
        report.assert_ok()
        assert report.redelivered >= 1 and not report.timed_out
