"""The read model's cluster fold says what the planner's Cluster aggregate says, after every
event of a cluster's life (the read model imports none of the planner; this test does)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from contracts.catalog import Action
from contracts.events import ClusterRequested, NodeResult
from contracts.layout import NodeSpec
from contracts.records import Recorded
from muster.bus.repository import pending_appends, rebuild
from muster.readmodel import lifecycle
from muster.readmodel.clusters import ClusterInfo, cluster_view, fold_cluster, job_ids, prefix
from services.planner.domain.cluster import Cluster

CID = "22222222-2222-4222-8222-222222222222"


def _node(i: int, *services: str) -> NodeSpec:
    return NodeSpec(id=f"n{i}", hostname=f"h{i}.local", hardwaretype="small", imagetype="deb", services=list(services))


def _life(seed: int) -> tuple[Cluster, list[Recorded]]:
    pick = random.Random(seed)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    cluster = Cluster(ClusterRequested(tenant="acme", cluster_id=CID, name="web", template="t", provider="sim",
                                       config={"a": 1}, job_id="j0"))
    for step in range(30):
        job = f"j{step // 5}"
        move = pick.randrange(8)
        if move == 0:
            cluster.change_layout(job, [_node(i, *pick.sample(["hdfs", "yarn", "zk"], pick.randrange(3)))
                                        for i in range(pick.randrange(1, 5))])
        elif move == 1:
            cluster.change_config(job, {"a": pick.randrange(3)})
        elif move == 2 and cluster.nodes:
            node = pick.choice(sorted(cluster.nodes))
            cluster.record_results(node, f"{node}.create", {"id": step}, {"access_v4": f"10.0.0.{step}"},
                                   pick.choice(["", f"{node}.example"]))
        elif move == 3 and cluster.nodes:  # a wave: several nodes' results in one event
            cluster.record_many([NodeResult(node_id=n, task_id=f"{n}.confirm", result={"providerid": f"p{step}"},
                                            ipaddresses=pick.choice([{}, {"access_v4": f"10.1.0.{step}"}]),
                                            hostname=pick.choice(["", f"{n}.wave"]))
                                 for n in pick.sample(sorted(cluster.nodes), pick.randrange(1, len(cluster.nodes) + 1))])
        elif move == 5 and cluster.nodes:
            node = pick.choice(sorted(cluster.nodes))
            for service in cluster.nodes[node].services:
                cluster.observe(job, f"{node}.status.{service}", node, service, pick.choice(["running", "stopped", "failed", "unknown"]))
        elif move == 6:
            # per node: some services stopped on every node, some on a few (`readmodel.desired`)
            everywhere = pick.sample(["hdfs", "yarn", "zk"], pick.randrange(3))
            cluster.desire(job, {(n, s) for n, spec in cluster.nodes.items() for s in spec.services
                                 if s in everywhere or pick.random() < 0.3})
        elif move == 7 and cluster.nodes:
            chains = [[Action.INSTALL], [Action.INSTALL, Action.CONFIGURE, Action.START], [Action.INSTALL, Action.CONFIGURE], [Action.STOP],
                      [Action.START], [Action.CONFIGURE], [Action.REMOVE], [Action.STOP, Action.START]]
            done = [(n, s, a, lifecycle.digest(cluster.config))
                    for n in sorted(cluster.nodes) for s in cluster.nodes[n].services for a in pick.choice(chains)]
            cluster.services_moved(job, lifecycle.moves(cluster.services_state, done))
        elif move == 4:
            cluster.change_lease(pick.choice([None, start + timedelta(hours=step)]), None, 0, "ops")
        else:
            cluster.set_status(pick.choice(["pending", "active", "failed", "deleted"]), job, pick.choice(["", "why"]))
    start = datetime(2026, 1, 1, tzinfo=UTC)
    log = [Recorded(seq=i + 1, subject=f"muster.evt.acme.cluster.{CID}", time=start + timedelta(seconds=i), event=a.event)
           for i, a in enumerate(pending_appends(cluster))]
    return cluster, log


def test_the_cluster_fold_is_the_aggregate_after_every_event() -> None:
    for seed in range(30):
        _, log = _life(seed)
        for n in range(1, len(log) + 1):
            aggregate = _rebuilt(log[:n])
            state = fold_cluster(log[:n])
            assert state is not None
            view = cluster_view(log[:n])
            assert view is not None
            summary = aggregate.summary()
            assert {k: view[k] for k in ("id", "tenant", "name", "template", "status", "job_id", "layout", "version", "expires_at")} == \
                {k: summary[k] for k in ("id", "tenant", "name", "template", "status", "job_id", "layout", "version", "expires_at")}
            assert (state.config, state.nodes, state.status_reason) == (aggregate.config, aggregate.nodes, aggregate.status_reason)
            assert state.drift() == aggregate.drift() and state.stopped_pairs() == aggregate.stopped_pairs()
            assert state.services_state == aggregate.services_state
            assert [n["hostname"] for n in view["nodes"]] == [aggregate.hostname(i) for i in sorted(aggregate.nodes)]
            assert [n["ipaddresses"] for n in view["nodes"]] == [aggregate.ipaddresses.get(i, {}) for i in sorted(aggregate.nodes)]


def _rebuilt(log: list[Recorded]) -> Cluster:
    history = [Recorded(seq=r.seq, subject=r.subject, time=r.time, event=r.event, aggregate_id=CID, version=r.seq) for r in log]
    aggregate = rebuild(Cluster, history)
    assert aggregate is not None
    return aggregate


def test_cluster_info_the_jobs_a_cluster_names_and_a_prefix_of_its_story() -> None:
    cluster, log = _life(3)
    info = ClusterInfo.from_history(log)
    assert info is not None and info.id == CID and info.nodes == list(cluster.nodes.values())
    assert info.services == sorted({s for n in cluster.nodes.values() for s in n.services})
    assert info.to_json()["updated"] == log[-1].time.isoformat()
    assert job_ids(log)[0] == "j0" and len(set(job_ids(log))) == len(job_ids(log))
    assert prefix(log, seq=3) == log[:3] and prefix(log, at=log[4].time) == log[:5]
    assert fold_cluster([]) is None and cluster_view([]) is None and ClusterInfo.from_history([]) is None


def test_a_nodes_machine_shows_its_provider_id_and_host_key_fingerprint() -> None:
    cluster = Cluster(ClusterRequested(tenant="acme", cluster_id=CID, name="web", template="t", provider="ns", config={}, job_id="j0"))
    cluster.change_layout("j0", [_node(1, "nats")])
    cluster.record_results("n1", "n1.create", {"providerid": "mu-0a1b2c3d", "ssh_host_key_fingerprint": "SHA256:abc",
                                               "ssh_host_keys": {"ssh-ed25519": "ssh-ed25519 AAAA"}}, {"access_v4": "10.213.0.2"}, "")
    cluster.record_results("n1", "n1.confirm", {"cloud_state": "running"}, {}, "")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    log = [Recorded(seq=i + 1, subject=f"muster.evt.acme.cluster.{CID}", time=start, event=a.event)
           for i, a in enumerate(pending_appends(cluster))]
    state = fold_cluster(log)
    assert state is not None
    [view] = state.node_views()
    assert view["machine"] == {"providerid": "mu-0a1b2c3d", "ssh_host_key_fingerprint": "SHA256:abc"}


def test_the_lives_reach_every_service_state() -> None:
    folds = [c for seed in range(30) for log in [_life(seed)[1]] for n in range(1, len(log) + 1)
             for c in [fold_cluster(log[:n])] if c is not None]
    assert {state for c in folds for state, _, _ in c.services_state.values()} == {"installed", "configured", "running", "stopped"}
    assert any(lifecycle.outdated(c.services_state, c.config) for c in folds)  # a config change while running
