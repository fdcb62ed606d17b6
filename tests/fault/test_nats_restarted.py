"""Scenario 3: kill -9 the nats-server mid-operation and start it again on the same port with
the same store: every service reconnects by itself (same PIDs), nothing acknowledged is lost
(every event stored before the kill is there after it, byte for byte), the job finishes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from contracts import subjects
from contracts.commands import Accepted, CreateCluster
from contracts.events import JobSucceeded
from muster.bus.eventstore import EventStore

from .harness import FaultStack, demo_catalog

pytestmark = [pytest.mark.fault, pytest.mark.timeout(150)]
T = "default"
OUTAGE_S = 2.0
"""How long the server stays down: several of the clients' reconnect periods (0.5 s)."""


async def test_services_ride_through_a_nats_server_restart(tmp_path: Path) -> None:
    async with await FaultStack.single(tmp_path) as fs:
        # Installs take 2 s: the server dies while provisioners are mid-task.
        await fs.load_catalog(T, demo_catalog(latency_ms="50-150", latency_ms_install="2000"))
        pids = fs.pids()
        replies: list[Accepted] = []

        create = fs.sending(T, CreateCluster(name="outage", template="hadoop-small", nodes=3), replies)
        await fs.when(f"muster.evt.{T}.task.>", lambda r: r.type == "TaskClaimed" and ".install." in r.event.task_id, create)
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

        report = await fs.check()
        report.assert_ok()
        assert report.jobs == {"succeeded": 1} and not report.timed_out
