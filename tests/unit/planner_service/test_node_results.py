"""Node results go into the cluster a wave at a time: one event holds what many outcomes said
(docs/decisions/0034), what was taken in already is not recorded again, and an event of the
older shape (one node) still reads."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from contracts.events import EVENT_ADAPTER, ClusterRequested, NodeResult, NodeResultsRecorded
from contracts.layout import NodeSpec
from contracts.records import Recorded
from muster.bus.bodies import INLINE_LIMIT
from muster.bus.repository import pending_appends
from muster.readmodel.clusters import fold_cluster
from services.planner.domain.cluster import Cluster

NOW = datetime(2026, 1, 1, tzinfo=UTC)
CID = "33333333-3333-4333-8333-333333333333"


def _cluster(nodes: int) -> Cluster:
    cluster = Cluster(ClusterRequested(tenant="acme", cluster_id=CID, name="web", template="t", provider="sim", config={},
                                       job_id="j1"))
    cluster.change_layout("j1", [NodeSpec(id=f"n{i}", hostname=f"h{i}", hardwaretype="small", imagetype="deb", services=[])
                                 for i in range(nodes)])
    cluster.collect_events()
    return cluster


def _confirmed(i: int) -> NodeResult:
    return NodeResult(node_id=f"n{i}", task_id=f"n{i}.confirm", result={"providerid": f"sim-{i}"},
                      ipaddresses={"access_v4": f"10.0.{i // 250}.{i % 250}"}, hostname=f"n{i}.example")


def _recorded(cluster: Cluster) -> list[NodeResultsRecorded]:
    return [a.event for a in pending_appends(cluster) if isinstance(a.event, NodeResultsRecorded)]


def test_a_wave_of_results_is_one_event_and_the_cluster_takes_each_in() -> None:
    cluster = _cluster(3)
    assert cluster.record_many([_confirmed(0), _confirmed(1), _confirmed(2)])
    events = _recorded(cluster)
    assert len(events) == 1 and [n.node_id for n in events[0].nodes] == ["n0", "n1", "n2"]
    assert cluster.ipaddresses["n2"] == {"access_v4": "10.0.0.2"} and cluster.hostnames["n1"] == "n1.example"
    assert cluster.results["n0"] == {"providerid": "sim-0"}


def test_results_taken_in_already_are_not_recorded_again() -> None:
    cluster = _cluster(3)
    cluster.record_many([_confirmed(0), _confirmed(1)])
    cluster.collect_events()
    assert not cluster.record_many([_confirmed(0), _confirmed(1)])  # a redelivered wave
    assert _recorded(cluster) == []
    assert cluster.record_many([_confirmed(1), _confirmed(2), _confirmed(2)])  # one new, one twice in the wave
    assert [[n.node_id for n in e.nodes] for e in _recorded(cluster)] == [["n2"]]


def test_a_large_wave_is_split_so_that_no_event_moves_its_body_out_of_the_message() -> None:
    cluster = _cluster(2000)
    cluster.record_many([_confirmed(i) for i in range(2000)])
    events = _recorded(cluster)
    assert 2 < len(events) < 2000 / 10
    assert all(len(e.model_dump_json()) < INLINE_LIMIT for e in events)
    assert [n.node_id for e in events for n in e.nodes] == [f"n{i}" for i in range(2000)]


def test_an_event_of_one_node_recorded_by_an_older_version_reads_as_a_wave_of_one() -> None:
    old = {"type": "NodeResultsRecorded", "v": 1, "cluster_id": CID, "node_id": "n1", "task_id": "n1.create",
           "result": {"providerid": "sim-1"}, "ipaddresses": {}, "hostname": ""}
    event = EVENT_ADAPTER.validate_json(json.dumps(old))
    assert isinstance(event, NodeResultsRecorded) and event.v == 2
    assert event.nodes == [NodeResult(node_id="n1", task_id="n1.create", result={"providerid": "sim-1"})]


def test_the_read_model_folds_a_wave_as_the_planner_does() -> None:
    cluster = Cluster(ClusterRequested(tenant="acme", cluster_id=CID, name="web", template="t", provider="sim", config={},
                                       job_id="j1"))
    cluster.change_layout("j1", [NodeSpec(id=f"n{i}", hostname=f"h{i}", hardwaretype="small", imagetype="deb", services=[])
                                 for i in range(4)])
    cluster.record_many([_confirmed(i) for i in range(4)])
    folded = fold_cluster([Recorded(seq=i + 1, subject=f"muster.evt.acme.cluster.{CID}", time=a.time or NOW, event=a.event)
                           for i, a in enumerate(pending_appends(cluster))])
    assert folded is not None and folded.ipaddresses == cluster.ipaddresses and folded.hostnames == cluster.hostnames
    assert folded.machines["n3"] == {"providerid": "sim-3"}
