"""Scenario 1 with segments (docs/decisions/0058): kill -9 the provisioner running a segment
mid-way (its create done, its confirm running); the segment's message comes back to the other
provisioner, which asks the planner acting for the job what the log holds of the steps first
and starts at the confirm: the create runs once, never twice, and the job succeeds. Real
processes, auth on (a provisioner's own rights read no other provisioner's task events)."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts import subjects
from contracts.commands import Accepted, CreateCluster
from contracts.events import JobSucceeded
from muster.bus.eventstore import EventStore

from .harness import FaultStack, demo_catalog

pytestmark = [pytest.mark.fault, pytest.mark.timeout(200)]


async def test_a_segment_whose_provisioner_dies_mid_way_goes_on_from_its_first_step_without_an_outcome(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUSTER_SEGMENTS", "1")  # (the planner processes inherit it)
    async with await FaultStack.single(tmp_path, provisioners=2) as fs:
        # Confirms take 3 s, so the victim is surely mid-confirm when it dies; its create is done.
        await fs.load_catalog("default", demo_catalog(latency_ms="20-80", latency_ms_confirm="3000"))
        replies: list[Accepted] = []
        create = fs.sending("default", CreateCluster(name="segment", template="hadoop-small", nodes=2), replies)
        claim = await fs.when("muster.evt.default.task.>",
                              lambda r: r.type == "TaskClaimed" and r.event.task_id.endswith(".confirm"), create)
        victim = claim.event.provisioner
        pid = await fs.kill(f"provisioner-{victim.removeprefix('prov-')}")
        job = replies[0].job_id
        final = await fs.client.wait(job, timeout=90)
        assert isinstance(final, JobSucceeded), final

        node = claim.event.task_id.split(".")[0]
        store = EventStore(fs.conn)
        made = await store.read(subjects.task_history_filter("default", job, f"{node}.create"))
        assert [(r.type, r.event.provisioner) for r in made] == [("TaskClaimed", victim), ("TaskSucceeded", victim)], made
        confirmed = await store.read(subjects.task_history_filter("default", job, claim.event.task_id))
        done = [(r.event.provisioner, r.event.attempt) for r in confirmed if r.type == "TaskSucceeded"]
        assert len(done) == 1 and done[0][0] != victim and done[0][1] == claim.event.attempt, done
        queued = [r.event for r in await store.read_many(subjects.job_history_filters("default", job)) if r.type == "TaskQueued"]
        assert any(q.after is not None for q in queued)  # (segments were on)
        print(f"\n[scenario 1, segments] killed {victim} (pid {pid}) running {claim.event.task_id}; "
              f"its create ran once; the confirm ran again on {done[0][0]}")

        # It asked the planner (its own rights read no other provisioner's events), as allowed.
        data = fs.deployment.data_dir
        survivor = (data / "logs" / f"provisioner-{done[0][0].removeprefix('prov-')}.log").read_text(errors="replace")
        assert "segment taken up after its finished steps" in survivor
        assert fs.server is not None and fs.server.log_path is not None
        violations = [line for line in fs.server.log_path.read_text(errors="replace").splitlines()
                      if "violation" in line.lower() and ".steps" in line]
        assert violations == [], violations

        report = await fs.check()
        report.assert_ok()
        assert not report.timed_out
