"""Scenario 9, long (`make test-long`, MUSTER_LONG_TESTS=1; docs/faults.md): partitions with
processes in network namespaces (`netstack.NetStack`).

- A provisioner cut off mid-task: its attempts time out at the planner and are retried on the
  other provisioner; after the heal, its late outcomes reach the log and change nothing.
- The compose topology (3 NATS nodes with routes through the delay proxy, 3 planners,
  2 trackers, 3 provisioners, 2 solvers, the pool) through the nemesis's faults one after the
  other, each with jobs in flight: a NATS node split from the others, a one-way split, a
  planner isolated, packet loss on the node leading EVENTS, latency between the nodes, a
  provisioner's link flapping, and a split combined with kill -9 of another node.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from contracts import subjects
from contracts.commands import Accepted, CreateCluster
from contracts.events import JobSucceeded
from muster.bus.cluster import REPLICAS, SERVICE_REPLICAS
from muster.bus.eventstore import EventStore

from .harness import demo_catalog, fault_options
from .netns import available
from .netstack import NetStack
from .test_sharded_planners import sharded_options  # compose's options, instance names, a short lease TTL

pytestmark = [
    pytest.mark.fault, pytest.mark.timeout(600),
    pytest.mark.skipif(available() is not None, reason=f"partitions need network namespaces: {available()}"),
    pytest.mark.skipif(os.environ.get("MUSTER_LONG_TESTS") != "1", reason="long: MUSTER_LONG_TESTS=1 (make test-long)"),
]
T = "default"
TASK_TIMEOUT = 6.0


async def _noop() -> None:
    return None


async def test_a_provisioner_cut_off_mid_task(tmp_path: Path) -> None:
    options = fault_options(tmp_path, 2)
    options["planner"] = [*options["planner"], "--task-timeout", str(TASK_TIMEOUT)]
    for name in ("provisioner-1", "provisioner-2"):  # the task stays claimed: the planner's timeout decides
        options[name] = [*options[name], "--ack-wait", "60"]
    async with await NetStack.start(tmp_path, replicas={"provisioner": 2}, extra_args=options, nats_nodes=1) as fs:
        await fs.load_catalog(T, demo_catalog(latency_ms="1000-2000"))
        replies: list[Accepted] = []

        async def create() -> None:
            reply = await fs.client.request(CreateCluster(name="cut", template="hadoop-small", nodes=3), tenant=T)
            assert isinstance(reply, Accepted), reply
            replies.append(reply)

        claim = await fs.when(f"muster.evt.{T}.task.>", lambda r: r.type == "TaskClaimed", create, timeout=60)
        victim_id = claim.event.provisioner
        victim = "provisioner-1" if victim_id == "prov-1" else "provisioner-2"
        await fs.nemesis.isolate(victim)
        cut_at = time.time()
        # Its attempts time out and go to the other provisioner; the job goes on without it.
        store = EventStore(fs.conn)
        timed_out = await fs.when(subjects.job_tasks(T, replies[0].job_id),
                                  lambda r: r.type == "TaskAttemptFailed" and r.event.error.startswith("timed out"), _noop,
                                  timeout=60)
        await asyncio.sleep(0)
        await fs.nemesis.heal()
        final = await fs.wait_final(replies[0].job_id, timeout=180)
        assert isinstance(final, JobSucceeded), final

        # Its outcome of the timed-out attempt reaches the log after the heal, and changes nothing.
        task_subject = subjects.task_events(T, replies[0].job_id, timed_out.event.task_id, victim_id)
        late = await fs.seen(task_subject, lambda r: r.type in ("TaskSucceeded", "TaskFailed")
                             and r.event.attempt == timed_out.event.attempt, timeout=60)
        history = await store.read_many(subjects.job_filters(T, replies[0].job_id))
        outcomes = [r for r in history if r.type in ("TaskCompleted", "TaskAttemptFailed") and r.event.task_id == timed_out.event.task_id]
        assert [(r.type, r.event.attempt) for r in outcomes][:1] == [("TaskAttemptFailed", timed_out.event.attempt)]
        assert outcomes[-1].type == "TaskCompleted" and outcomes[-1].event.attempt > timed_out.event.attempt
        report = await fs.check()
        print(f"\n[scenario 9, provisioner] cut off {victim} {time.time() - cut_at:.0f}s; "
              f"{len(report.timed_out)} attempts timed out; {report.late_results} late results; "
              f"{report.overlapping} tasks ran twice at once")
        report.assert_ok()
        assert report.late_results >= 1 and late.event.provisioner == victim_id


async def test_the_compose_topology_through_the_nemesis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUSTER_REPLICAS", str(REPLICAS))
    replicas = {**SERVICE_REPLICAS, "tracker": 2}
    async with await NetStack.start(tmp_path, replicas=replicas, extra_args=sharded_options(tmp_path), nats_nodes=3,
                                    proxied=True) as fs:
        await fs.load_catalog(T, demo_catalog(latency_ms="100-300"))
        nem = fs.nemesis
        leader = str((await fs.client.js.stream_info(subjects.EVENTS_STREAM)).cluster.leader)  # type: ignore[union-attr]
        others = [n.name for n in fs.nodes if n.name != leader]
        phases: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            (f"{others[0]} split from the other nodes", lambda: nem.partition([others[0]], [n.name for n in fs.nodes if n.name != others[0]])),
            (f"{leader} (EVENTS leader) split from the others", lambda: nem.partition([leader], others)),
            (f"{others[1]} -> the others lost (one way)", lambda: nem.partition([others[1]], [n for n in fs.nodes_names() if n != others[1]], one_way=True)),
            ("planner-2 isolated", lambda: nem.isolate("planner-2")),
            (f"{leader}: 20% of packets lost", lambda: nem.loss(leader, 20)),
            ("150 ms between every pair of NATS nodes", lambda: _slow_all(fs)),
            ("provisioner-1's link flapping", lambda: _flap(fs, "provisioner-1")),
            (f"{others[0]} split, and kill -9 of {others[1]}", lambda: _split_and_kill(fs, others[0], others[1])),
        ]
        done = 0
        for k, (what, fault) in enumerate(phases):
            replies = [await fs.client.request(CreateCluster(name=f"f{k}{i}", template="hadoop-small", nodes=3), tenant=T)
                       for i in range(2)]
            assert all(isinstance(r, Accepted) for r in replies), replies
            await fs.when(f"muster.evt.{T}.job.>", lambda r: r.type == "TaskCompleted", _noop, timeout=60)
            await fault()
            print(f"[nemesis] {what}: {nem.describe()}", flush=True)
            await asyncio.sleep(8)
            await nem.heal()
            await _restart_killed(fs)
            finals = [await fs.wait_final(r.job_id, timeout=180) for r in replies if isinstance(r, Accepted)]
            assert all(isinstance(f, JobSucceeded) for f in finals), (what, finals)
            done += len(finals)
        report = await fs.check()
        print(f"\n[scenario 9, compose] {len(phases)} faults, {done} jobs succeeded; {report.summary()}")
        report.assert_ok()


async def _slow_all(fs: NetStack) -> None:
    names = fs.nodes_names()
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            await fs.nemesis.latency(a, b, 150)


async def _flap(fs: NetStack, name: str) -> None:
    fs.nemesis.flap(name, 1.0, 8.0)


async def _split_and_kill(fs: NetStack, split: str, kill: str) -> None:
    await fs.nemesis.partition([split], [n for n in fs.nodes_names() if n != split])
    await fs.kill_server(next(i for i, n in enumerate(fs.nodes) if n.name == kill))


async def _restart_killed(fs: NetStack) -> None:
    for i, node in enumerate(fs.nodes):
        if node.process is None:
            await fs.restart_server(i)
