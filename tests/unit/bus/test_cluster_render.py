"""The distributed deployment and the loopback cluster test come from one description
(muster/bus/cluster.py): the checked-in files are exactly what it renders."""

from __future__ import annotations

from pathlib import Path

import yaml

from muster.bus import cluster

ROOT = Path(__file__).resolve().parents[3]


def test_checked_in_deploy_files_are_the_rendered_ones() -> None:
    stale = [rel for rel, text in cluster.rendered_files().items() if (ROOT / rel).read_text() != text]
    assert not stale, f"{stale} differ from muster/bus/cluster.py: run `python -m muster.bus.cluster`"


def test_every_node_fsyncs_every_write_and_routes_to_all_three() -> None:
    for rel, text in cluster.deploy_configs().items():
        assert "sync_interval: always" in text, rel
        assert all(f"nats-route://{n}:{cluster.CLUSTER_PORT}" in text for n in cluster.NODES), rel


def test_compose_runs_each_service_with_the_shared_options_on_three_replicas() -> None:
    doc = yaml.safe_load(cluster.render_compose())
    services = doc["services"]
    for node in cluster.NODES:
        assert f"./deploy/nats/{node}.conf:/etc/nats/nats.conf:ro" in services[node]["volumes"]
    for service, options in cluster.SERVICE_OPTIONS.items():
        entry = services[service]
        assert entry["environment"]["MUSTER_REPLICAS"] == str(cluster.REPLICAS)
        assert entry["environment"]["NATS_URL"].count("nats://") == len(cluster.NODES)
        assert entry["command"][0] == service
        assert not options or entry["command"][-len(options):] == options
        assert entry.get("deploy", {}).get("replicas", 1) == cluster.SERVICE_REPLICAS[service]


def test_loopback_nodes_are_rendered_like_the_compose_nodes(tmp_path: Path) -> None:
    nodes = cluster.loopback_cluster(tmp_path, [(14222, 16222), (14223, 16223), (14224, 16224)])
    loopback = cluster.render_node_config(nodes[0].address, nodes[0].peers, "/data/jetstream", "0.0.0.0")  # type: ignore[arg-type]
    compose = cluster.deploy_configs()["deploy/nats/nats-1.conf"]
    # Same settings line for line; only addresses differ (and loopback nodes serve no HTTP).
    def settings(text: str) -> set[str]:
        return {line for line in text.splitlines() if not line.startswith("#")}

    differ = {line.split(":")[0].strip() for line in settings(loopback) ^ settings(compose)}
    assert differ <= {"listen", "http", "nats-route"}, differ
