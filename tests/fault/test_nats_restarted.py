"""Scenario 3: kill -9 the nats-server mid-operation and start it again on the same port with
the same store: every service reconnects by itself (same PIDs), nothing acknowledged is lost
(every event stored before the kill is there after it, byte for byte), the job finishes.

The task queue lives in memory (docs/decisions/0013), so the restart loses the tasks queued and
not yet claimed: the provisioner (capacity 2) has a backlog then. The planner finds TASKS new
and publishes them again, from the log; none of them waits for its timeout."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from contracts import subjects
from contracts.commands import Accepted, CreateCluster
from contracts.events import JobSucceeded
from muster.bus.eventstore import EventStore, Recorded

from .harness import FaultStack, demo_catalog

pytestmark = [pytest.mark.fault, pytest.mark.timeout(150)]
T = "default"
OUTAGE_S = 2.0
"""How long the server stays down: several of the clients' reconnect periods (0.5 s)."""
BACKLOG = 2
"""Installs queued and not claimed when the server dies (the restart loses them)."""


async def test_services_ride_through_a_nats_server_restart(tmp_path: Path) -> None:
    # The planner keeps its shards through the outage (leases of the default 10 s, not the
    # harness's 3 s), so the lost tasks are its reconnect's to repair, not a resume's. The
    # provisioner claims none ahead: what it claimed ahead it holds, and a quick one could
    # hold the whole backlog by the kill, leaving nothing lost to publish again.
    async with await FaultStack.single(tmp_path, capacity=2, extra_args={"planner": ["--lease-ttl", "10"],
                                                                          "provisioner": ["--claim-ahead", "0"]}) as fs:
        # Installs take 2 s: the server dies while the provisioner is mid-task, with installs
        # waiting in the queue behind them.
        await fs.load_catalog(T, demo_catalog(latency_ms="50-150", latency_ms_install="2000"))
        pids = fs.pids()
        replies: list[Accepted] = []
        installs: dict[str, set[tuple[str, int]]] = {"TaskQueued": set(), "TaskClaimed": set()}

        def backlog(r: Recorded) -> bool:
            if r.type in installs and ".install." in r.event.task_id:
                installs[r.type].add((r.event.task_id, r.event.attempt))
            return bool(installs["TaskClaimed"]) and len(installs["TaskQueued"] - installs["TaskClaimed"]) >= BACKLOG

        create = fs.sending(T, CreateCluster(name="outage", template="hadoop-small", nodes=5), replies)
        await fs.when(f"muster.evt.{T}.>", backlog, create)
        stored = {r.seq: (r.subject, r.event.model_dump_json()) for r in await EventStore(fs.conn).read(subjects.ALL_EVENTS)}
        await fs.kill_server()
        await asyncio.sleep(OUTAGE_S)  # a deliberate outage, not a wait for a condition
        await fs.restart_server()

        final = await fs.client.wait(replies[0].job_id, timeout=90)
        assert isinstance(final, JobSucceeded), final
        after = {r.seq: (r.subject, r.event.model_dump_json()) for r in await EventStore(fs.conn).read(subjects.ALL_EVENTS)}
        lost = sorted(seq for seq in stored if after.get(seq) != stored[seq])
        assert not lost, f"{len(lost)} acknowledged events lost or changed: seqs {lost[:20]}"
        assert fs.pids() == pids, "a service restarted"
        print(f"\n[scenario 3] {len(stored)} events stored before the kill, all there after; {len(after)} in the end")

        requeued = _requeued(fs.deployment.data_dir / "logs" / "planner.log")
        assert requeued and requeued[0] > 0, requeued
        print(f"[scenario 3] the planner published {requeued[0]} queued attempts again")

        report = await fs.check()
        report.assert_ok()
        assert report.jobs == {"succeeded": 1} and not report.timed_out


def _requeued(planner_log: Path) -> list[int]:
    """How many attempts the planner published again each time it found the task queue lost."""
    lines = (json.loads(line) for line in planner_log.read_text().splitlines() if line.startswith("{"))
    return [line["attempts"] for line in lines if line.get("event") == "task queue lost; queued attempts published again"]
