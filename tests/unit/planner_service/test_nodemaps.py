"""The nodes map by reference (#14.2), without a broker: the planner writes chunks where nodes
changed, the provisioner puts back exactly the map a plugin saw before, and a task message of
a 10,000-node cluster stays under 8 KB."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from contracts.events import ClusterRequested, JobPlanned, JobRequested, NodeResult, PlannedTaskRecord
from contracts.layout import NodeSpec
from contracts.limits import MAX_RESULT_BYTES
from contracts.nodemaps import CHUNK_NODES, NodeManifest
from contracts.tasks import TaskMessage, TaskOutcome
from muster.catalog.files import load_catalog
from services.planner.domain.cluster import Cluster
from services.planner.domain.job import Job
from services.planner.domain.plan import build_plan
from services.planner.nodemaps import NodeMaps
from services.planner.tasks import nodes_map, task_message
from services.provisioner.nodes import NodesResolver

DEMO = Path(__file__).parents[3] / "muster" / "demo" / "catalog"
CID = "00000000-0000-0000-0000-0000000000c1"
SERVICES = ["base", "hdfs-datanode", "yarn-nodemanager"]


class FakeKv:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.puts: list[str] = []
        self.gets = 0

    async def put(self, key: str, value: bytes) -> None:
        self.data[key] = value
        self.puts.append(key)

    async def get(self, key: str) -> Any:
        from nats.js.errors import KeyNotFoundError

        self.gets += 1
        if key not in self.data:
            raise KeyNotFoundError()
        return SimpleNamespace(value=self.data[key])


class Recorder:
    def __init__(self, result: dict[str, Any] | None = None) -> None:
        self.seen: list[TaskMessage] = []
        self.result = result or {}

    async def execute(self, task: TaskMessage) -> TaskOutcome:
        self.seen.append(task)
        return TaskOutcome(ok=True, result=self.result)


def _cluster(n: int) -> Cluster:
    cluster = Cluster(ClusterRequested(tenant="acme", cluster_id=CID, name="big", template="t", provider="sim", job_id="j"))
    cluster.change_layout("j", [NodeSpec(id=f"n{i}", hardwaretype="medium", imagetype="ubuntu22", services=SERVICES,
                                         hostname=f"big-{i}.local", nodenum=i, flavor="m", image="img", sshuser="u")
                                for i in range(1000, 1000 + n)])
    return cluster


def _resolver(kv: FakeKv, inner: Any) -> NodesResolver:
    resolver = NodesResolver(inner, js=None)  # type: ignore[arg-type]
    resolver._kv = kv
    return resolver


async def test_the_provisioner_puts_back_the_map_the_plugin_saw_before() -> None:
    catalog, cluster, kv = load_catalog(DEMO), _cluster(200), FakeKv()
    maps = NodeMaps(kv)
    ref = await maps.ref(cluster, catalog)
    manifest = NodeManifest.model_validate_json(kv.data[ref])
    assert manifest.count == 200 and len(manifest.chunks) == len({i // CHUNK_NODES for i in range(1000, 1200)})
    recorder = Recorder()
    resolver = _resolver(kv, recorder)
    whole = nodes_map(cluster, catalog)
    by_ref = TaskMessage.model_validate({
        "tenant": "acme", "cluster_id": CID, "job_id": "j", "task_id": "n1000.bootstrap", "attempt": 1, "action": "bootstrap",
        "node": whole["n1000"], "provider": {"name": "sim", "providertype": "simulated"}, "nodes_ref": ref})
    await resolver.execute(by_ref)
    [seen] = recorder.seen
    assert seen == by_ref.model_copy(update={"nodes": whole, "nodes_ref": None})
    assert list(seen.nodes) == list(whole)  # the same order too


async def test_a_changed_address_rewrites_one_chunk_and_the_manifest() -> None:
    catalog, cluster, kv = load_catalog(DEMO), _cluster(1000), FakeKv()
    maps = NodeMaps(kv)
    first = await maps.ref(cluster, catalog)
    chunks = len(kv.puts) - 1
    assert chunks >= 1000 // CHUNK_NODES
    assert await maps.ref(cluster, catalog) == first and len(kv.puts) == chunks + 1  # nothing new: nothing written
    cluster.record_results("n1500", "n1500.confirm", {}, {"access_v4": "10.0.0.1"}, "")
    second = await maps.ref(cluster, catalog)
    assert second != first and len(kv.puts) == chunks + 3  # one chunk, one manifest
    resolver = _resolver(kv, Recorder())
    assert (await resolver.nodes(second))["n1500"].ipaddresses == {"access_v4": "10.0.0.1"}
    gets = kv.gets
    assert (await resolver.nodes(first))["n1500"].ipaddresses == {}
    assert kv.gets == gets + 2  # the earlier version: its manifest and the one chunk that differs
    # A reloaded cluster (another object, e.g. after a failed save) is written whole again,
    # under the same keys.
    again = _cluster(1000)
    again.record_results("n1500", "n1500.confirm", {}, {"access_v4": "10.0.0.1"}, "")
    assert await maps.ref(again, catalog) == second


async def test_a_task_message_of_a_10000_node_cluster_stays_under_8_kb() -> None:
    catalog, cluster, kv = load_catalog(DEMO), _cluster(10_000), FakeKv()
    plan = build_plan(catalog.services, list(cluster.nodes.values()), "create")
    job = Job(JobRequested(tenant="acme", job_id="00000000-0000-0000-0000-00000000000a", cluster_id=CID, operation="create", request={}))
    compact = plan.to_compact_json()
    job.record_plan(JobPlanned(job_id=str(job.id), tasks=[PlannedTaskRecord(id=t.id, node=t.node, action=t.action, service=t.service)
                                                          for t in plan.tasks], links=compact["links"], stages=compact["stages"]))
    task = next(t.id for t in plan.tasks if t.action.value == "install")
    ref = await NodeMaps(kv).ref(cluster, catalog)
    message = task_message(job, cluster, catalog, task, 1, "default", nodes_ref=ref)
    size = len(message.model_dump_json())
    inline = len(task_message(job, cluster, catalog, task, 1, "default").model_dump_json())
    assert size < 8 * 1024 and inline > 2_000_000, (size, inline)
    assert max(len(v) for v in kv.data.values()) < 64 * 1024


async def test_a_missing_map_fails_the_attempt_and_an_oversized_result_is_refused() -> None:
    kv = FakeKv()
    resolver = _resolver(kv, Recorder(result={"blob": "x" * MAX_RESULT_BYTES}))
    task = TaskMessage.model_validate({
        "tenant": "acme", "cluster_id": CID, "job_id": "j", "task_id": "n1.install.base", "attempt": 1, "action": "install",
        "node": {"id": "n1", "hostname": "h", "nodenum": 1, "hardwaretype": "m", "imagetype": "u"},
        "provider": {"name": "sim", "providertype": "simulated"}, "nodes_ref": "acme.feedbeef"})
    outcome = await resolver.execute(task)
    assert not outcome.ok and "acme.feedbeef" in outcome.error and "expired" in outcome.error
    outcome = await resolver.execute(task.model_copy(update={"nodes_ref": None}))
    assert not outcome.ok and f"the limit is {MAX_RESULT_BYTES:,} bytes" in outcome.error


async def test_concurrent_publishes_all_get_a_whole_map() -> None:
    """Tasks are published concurrently: a second call must not see half of what the first
    is writing (found by test_resume: a manifest naming no chunk)."""
    import asyncio

    class SlowKv(FakeKv):
        async def put(self, key: str, value: bytes) -> None:
            await asyncio.sleep(0)  # let the other call run in between
            await super().put(key, value)

    catalog, cluster, kv = load_catalog(DEMO), _cluster(300), SlowKv()
    maps = NodeMaps(kv)
    refs = await asyncio.gather(*(maps.ref(cluster, catalog) for _ in range(5)))
    assert len(set(refs)) == 1
    resolver = _resolver(kv, Recorder())
    assert len(await resolver.nodes(refs[0])) == 300


async def test_a_provisioner_keeps_only_the_chunks_of_the_maps_it_keeps(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster whose nodes get their addresses one wave at a time rewrites its chunks again
    and again; the superseded ones are let go, not kept until a count is reached."""
    from services.provisioner import nodes as resolving

    monkeypatch.setattr(resolving, "CACHED_CHUNKS", 20)
    catalog, cluster, kv = load_catalog(DEMO), _cluster(640), FakeKv()
    maps, resolver = NodeMaps(kv), _resolver(kv, Recorder())
    per_map = len(NodeManifest.model_validate_json(kv.data[await maps.ref(cluster, catalog)]).chunks)
    for wave in range(30):  # every chunk changes in every wave
        cluster.record_many([NodeResult(node_id=f"n{i}", task_id=f"n{i}.confirm", ipaddresses={"access_v4": f"10.0.{wave}.{i % 250}"})
                             for i in range(1000, 1640)])
        ref = await maps.ref(cluster, catalog)
        assert (await resolver.nodes(ref))["n1639"].ipaddresses == {"access_v4": f"10.0.{wave}.{639 % 250}"}
        assert len(resolver._chunks) <= resolving.CACHED_MAPS * per_map
    kept = {key for chunks in resolver._chunks_of.values() for key in chunks}
    assert set(resolver._chunks) == kept


async def test_tasks_that_need_the_same_new_map_at_once_read_it_once() -> None:
    import asyncio

    catalog, cluster, kv = load_catalog(DEMO), _cluster(300), FakeKv()
    ref = await NodeMaps(kv).ref(cluster, catalog)
    resolver = _resolver(kv, Recorder())
    maps = await asyncio.gather(*(resolver.nodes(ref) for _ in range(50)))
    assert kv.gets == 1 + len(NodeManifest.model_validate_json(kv.data[ref]).chunks)  # the manifest and each chunk once
    assert all(m is maps[0] for m in maps) and len(maps[0]) == 300 and not resolver._reading
