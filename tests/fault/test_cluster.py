"""Scenario 4: a 3-node NATS cluster on loopback (rendered by the same function as
deploy/nats/*.conf, streams replicated 3 times, the services with compose.yaml's options and
instance counts); kill -9 the node leading the EVENTS stream mid-operation: the job finishes and
nothing acknowledged is lost. (The victim is chosen so that the planner is not connected to
it and it does not lead TASKS: see `choose_victim`.)"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from nats.aio.msg import Msg

from contracts import subjects
from contracts.commands import Accepted, CreateCluster, Rejected
from contracts.events import JobSucceeded
from muster.bus.cluster import REPLICAS, SERVICE_OPTIONS, SERVICE_REPLICAS
from muster.bus.eventstore import EventStore

from .harness import FaultStack, demo_catalog, nth

pytestmark = [pytest.mark.fault, pytest.mark.timeout(180)]
T = "default"


def compose_like_options(base: Path) -> dict[str, list[str]]:
    """compose.yaml's options; only where each provisioner keeps its files differs (its own
    directory here, its container there)."""
    options = {service: list(args) for service, args in SERVICE_OPTIONS.items()}
    for i in range(1, SERVICE_REPLICAS["provisioner"] + 1):
        options[f"provisioner-{i}"] = ["--work-dir", str(base / "work" / f"provisioner-{i}")]
    return options


async def leader_of(fs: FaultStack, stream: str) -> str:
    info = await fs.client.js.stream_info(stream)
    assert info.cluster is not None and info.cluster.leader
    return info.cluster.leader


async def step_down(fs: FaultStack, stream: str, timeout: float = 20.0) -> str:
    """Make another node lead `stream`; returns it (announced in the server's advisory)."""
    old = await leader_of(fs, stream)
    elected: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def on_advisory(msg: Msg) -> None:
        leader = json.loads(msg.data).get("leader", "")
        if leader and leader != old and not elected.done():
            elected.set_result(leader)

    assert fs.nc is not None
    sub = await fs.nc.subscribe(f"$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.{stream}", cb=on_advisory)
    try:
        await fs.nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", b"", timeout=timeout)
        return await asyncio.wait_for(elected, timeout)
    finally:
        await sub.unsubscribe()


def planner_node(fs: FaultStack) -> str:
    """The node the planner is connected to, from its own "started" log line."""
    for line in fs.deployment.child("planner").log_path.read_text().splitlines():
        if '"started"' in line:
            port = int(json.loads(line)["nats"].rsplit(":", 1)[1])
            return next(n.name for n in fs.nodes if n.port == port)
    raise AssertionError("the planner logged no start")


async def choose_victim(fs: FaultStack) -> str:
    """The node leading EVENTS, made to be neither the planner's node nor TASKS' leader.

    Both precautions step around a known bug (test_found_bugs.py): a task message whose publish
    fails (its connection dies under it, or TASKS elects a leader) is never published again by a
    running planner, and the job stalls until the task timeout. Remove them when it is fixed."""
    avoid = planner_node(fs)
    victim = await leader_of(fs, subjects.EVENTS_STREAM)
    for _ in range(6):
        if victim != avoid:
            break
        victim = await step_down(fs, subjects.EVENTS_STREAM)
    assert victim != avoid, "could not move the EVENTS leader off the planner's node"
    for _ in range(6):
        if await leader_of(fs, subjects.TASKS_STREAM) != victim:
            break
        await step_down(fs, subjects.TASKS_STREAM)
    return victim


async def test_the_job_finishes_when_the_stream_leader_dies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUSTER_REPLICAS", str(REPLICAS))
    async with await FaultStack.cluster(tmp_path, replicas=SERVICE_REPLICAS, extra_args=compose_like_options(tmp_path)) as fs:
        info = await fs.client.js.stream_info(subjects.EVENTS_STREAM)
        assert info.config.num_replicas == REPLICAS and info.cluster is not None
        await fs.load_catalog(T, demo_catalog(latency_ms="100-300"))
        replies: list[Accepted] = []

        async def create() -> None:
            # The planner reads the catalog just applied; a follower may answer that read without
            # it (test_found_bugs.py, stale direct gets): ask again. Remove when that is fixed.
            for _ in range(5):
                reply = await fs.client.send(T, CreateCluster(name="replicated", template="hadoop-small", nodes=3))
                if not (isinstance(reply, Rejected) and "unknown cluster template" in reply.reason):
                    break
                print(f"\n[scenario 4] a stale catalog read: {reply.reason}; asking again")
            assert isinstance(reply, Accepted), reply
            replies.append(reply)

        leader = await choose_victim(fs)
        await fs.when(f"muster.evt.{T}.job.*", nth("TaskCompleted", 6), create)
        stored = {r.seq: (r.subject, r.event.model_dump_json()) for r in await EventStore(fs.nc).read(subjects.ALL_EVENTS)}
        await fs.kill_server(next(i for i, n in enumerate(fs.nodes) if n.name == leader))

        final = await fs.wait_final(replies[0].job_id, timeout=120)
        assert isinstance(final, JobSucceeded), final
        after_info = await fs.client.js.stream_info(subjects.EVENTS_STREAM)
        after = {r.seq: (r.subject, r.event.model_dump_json()) for r in await EventStore(fs.nc).read(subjects.ALL_EVENTS)}
        lost = sorted(seq for seq in stored if after.get(seq) != stored[seq])
        assert not lost, f"{len(lost)} acknowledged events lost or changed: seqs {lost[:20]}"
        print(f"\n[scenario 4] killed {leader} (EVENTS leader); new leader {after_info.cluster.leader}; "
              f"{len(stored)} events before, all kept; {len(after)} in the end")

        report = await fs.check()
        report.assert_ok()
        assert report.jobs == {"succeeded": 1}
