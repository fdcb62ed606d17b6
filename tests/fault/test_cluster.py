"""Scenario 4: a 3-node NATS cluster on loopback (rendered by the same function as
deploy/nats/*.conf, streams replicated 3 times, the services with compose.yaml's options and
instance counts); kill -9 the node leading the EVENTS stream mid-operation: the job finishes and
nothing acknowledged is lost. (The victim is chosen so that the planner is not connected to
it and it does not lead TASKS: see `choose_victim`.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts import subjects
from contracts.commands import Accepted, CreateCluster
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


async def choose_victim(fs: FaultStack) -> str:
    """The node leading EVENTS: killing it forces a new leader for the log mid-operation."""
    return await leader_of(fs, subjects.EVENTS_STREAM)


async def test_the_job_finishes_when_the_stream_leader_dies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUSTER_REPLICAS", str(REPLICAS))
    async with await FaultStack.cluster(tmp_path, replicas=SERVICE_REPLICAS, extra_args=compose_like_options(tmp_path)) as fs:
        info = await fs.client.js.stream_info(subjects.EVENTS_STREAM)
        assert info.config.num_replicas == REPLICAS and info.cluster is not None
        await fs.load_catalog(T, demo_catalog(latency_ms="100-300"))
        replies: list[Accepted] = []

        async def create() -> None:
            reply = await fs.client.send(T, CreateCluster(name="replicated", template="hadoop-small", nodes=3))
            assert isinstance(reply, Accepted), reply
            replies.append(reply)

        leader = await choose_victim(fs)
        await fs.when(f"muster.evt.{T}.job.>", nth("TaskCompleted", 6), create)
        stored = {r.seq: (r.subject, r.event.model_dump_json()) for r in await EventStore(fs.conn).read(subjects.ALL_EVENTS)}
        await fs.kill_server(next(i for i, n in enumerate(fs.nodes) if n.name == leader))

        final = await fs.wait_final(replies[0].job_id, timeout=120)
        assert isinstance(final, JobSucceeded), final
        after_info = await fs.client.js.stream_info(subjects.EVENTS_STREAM)
        after = {r.seq: (r.subject, r.event.model_dump_json()) for r in await EventStore(fs.conn).read(subjects.ALL_EVENTS)}
        lost = sorted(seq for seq in stored if after.get(seq) != stored[seq])
        assert not lost, f"{len(lost)} acknowledged events lost or changed: seqs {lost[:20]}"
        print(f"\n[scenario 4] killed {leader} (EVENTS leader); new leader {after_info.cluster.leader if after_info.cluster else '?'}; "
              f"{len(stored)} events before, all kept; {len(after)} in the end")

        report = await fs.check()
        report.assert_ok()
        assert report.jobs == {"succeeded": 1}
