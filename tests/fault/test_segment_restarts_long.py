"""Segments around the planner, long (`make test-long`, MUSTER_LONG_TESTS=1; docs/faults.md):
a segment of an earlier job delivered again to a planner started again since.

A restarted planner loads each cluster's current job only. Before session 29 it kept silent
about the steps of an earlier job of its own clusters, and such a delivery (one that waited out
a provisioner's ack wait longer than its step's attempt timeout, the job ending and the next one
beginning meanwhile) was given back at every delivery, for ever. It is stale (one job of a
cluster runs at a time: an earlier one has ended), and the delivery is ended unrun. The wait
is the ack wait (30 s), which must outlast the job, the next one and the restart.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from nats.aio.msg import Msg

from contracts.commands import Accepted, CreateCluster, DeleteCluster
from contracts.events import JobSucceeded
from muster.bus.wire import flush

from . import segment_faults as sf
from .harness import FaultStack

pytestmark = [
    pytest.mark.fault, pytest.mark.timeout(300),
    pytest.mark.skipif(os.environ.get("MUSTER_LONG_TESTS") != "1", reason="long: MUSTER_LONG_TESTS=1 (make test-long)"),
]
T = "default"
TIMEOUT_S = 4.0
ACK_WAIT_S = 30.0


async def test_a_segment_of_an_earlier_job_delivered_again_after_a_planner_restart_is_stale(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUSTER_SEGMENTS", "1")
    options = {"planner": ["--task-timeout", str(TIMEOUT_S)], "provisioner": ["--ack-wait", str(ACK_WAIT_S)]}
    async with await FaultStack.single(tmp_path, provisioners=2, extra_args=options) as fs:
        await fs.load_catalog(T, sf.catalog())
        loop = asyncio.get_running_loop()
        terminated: asyncio.Future[tuple[float, dict[str, Any]]] = loop.create_future()

        async def on_terminated(msg: Msg) -> None:
            if not terminated.done():
                terminated.set_result((loop.time(), json.loads(msg.data)))

        sub = await fs.conn.subscribe(sf.TERMINATED, cb=on_terminated)
        await flush(fs.conn)
        replies: list[Accepted] = []
        await fs.sending(T, CreateCluster(name="earlier", template="hadoop-small", nodes=2), replies)()
        job = replies[0].job_id
        segments = sf.Segments()
        claim = (await fs.follow(f"muster.evt.{T}.>", segments.follower_start_claimed, timeout=90))[-1]
        killed_at = loop.time()
        victim = claim.event.provisioner
        await fs.kill(sf.process(victim))
        # Its step times out (4 s), runs again on the other provisioner, and the job ends; the
        # cluster's next job (a delete) runs; the planner is killed and started again: all
        # before the dead provisioner's delivery comes back (30 s).
        assert isinstance(await fs.wait_final(job, timeout=60), JobSucceeded)
        deleted = await fs.client.send(T, DeleteCluster(cluster_id=replies[0].cluster_id))
        assert isinstance(deleted, Accepted), deleted
        assert isinstance(await fs.wait_final(deleted.job_id, timeout=60), JobSucceeded)
        await fs.kill("planner")
        await fs.restart("planner")
        restarted_at = loop.time()
        at, advisory = await asyncio.wait_for(terminated, ACK_WAIT_S + 60)
        await sub.unsubscribe()
        assert at > restarted_at, (f"the delivery came back {at - killed_at:.1f} s after the kill, before the planner's "
                                   f"restart ({restarted_at - killed_at:.1f} s): nothing asked of the restarted planner")

        survivor = next(p for p in ("prov-1", "prov-2") if p != victim)
        ended = sf.said(fs, sf.process(survivor), sf.ENDED_STALE)
        # (any other segment ended so is the victim's too, caught with a step just claimed)
        assert all(r["job"] == job for r in ended), ended
        ended = [r for r in ended if r["task"] == segments.head(claim.event.task_id)]
        assert len(ended) == 1, ended
        assert f"is not its cluster's current job ({deleted.job_id})" in ended[0]["why"], ended
        claims, _ = sf.runs(await sf.story(fs, job))
        step = claim.event.task_id
        assert [c for c in claims[step] if c[1] == claim.event.attempt] == [(victim, claim.event.attempt, 1)], claims[step]
        report = await sf.settled(fs, f"[segments, earlier job] {victim} killed running {step}; the delivery came back "
                                  f"{at - killed_at:.1f} s later ({advisory.get('deliveries')} deliveries), after the job, a delete and a "
                                  f"planner restart ({restarted_at - killed_at:.1f} s), and was ended unrun: {ended[0]['why']}")
        assert report.overlapping == 0 and report.late_results == 0
