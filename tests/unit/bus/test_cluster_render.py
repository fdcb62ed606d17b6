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
        # Provisioners are one compose service each: every one is its own principal.
        names = cluster.provisioner_names() if service == "provisioner" else [service]
        for name in names:
            entry = services[name]
            assert entry["environment"]["MUSTER_REPLICAS"] == str(cluster.REPLICAS)
            assert entry["environment"]["NATS_URL"].count("nats://") == len(cluster.NODES)
            assert entry["environment"]["MUSTER_CREDENTIALS"] == f"/creds/{name}.cred" and "auth" in entry["depends_on"]
            assert entry["command"][0] == service
            own = ["--id", name] if service == "provisioner" else []
            assert entry["command"][len(entry["command"]) - len(options) - len(own):] == [*options, *own]
        replicas = len(names) if service == "provisioner" else services[service].get("deploy", {}).get("replicas", 1)
        assert replicas == cluster.SERVICE_REPLICAS[service]
    assert services["auth"]["command"][0] == "auth" and "creds:/creds" in services["auth"]["volumes"]


def test_the_nodes_authorize_through_the_callout_with_keys_from_the_environment() -> None:
    for rel, text in cluster.deploy_configs().items():
        assert "auth_callout" in text and "issuer: $MUSTER_AUTH_ISSUER" in text and "password: $MUSTER_BUS_SECRET" in text, rel
    people: list[dict[str, str]] = cluster.bootstrap_document()["principals"]  # type: ignore[assignment]  # a JSON document
    principals = {p["principal"] for p in people}
    assert principals == {"admin", "solver", "planner", "tracker", *cluster.provisioner_names()}


def test_loopback_nodes_are_rendered_like_the_compose_nodes(tmp_path: Path) -> None:
    nodes = cluster.loopback_cluster(tmp_path, [(14222, 16222), (14223, 16223), (14224, 16224)])
    from services.auth.keys import server_auth_config

    auth = server_auth_config("", "", from_env=True)
    loopback = cluster.render_node_config(nodes[0].address, nodes[0].peers, "/data/jetstream", "0.0.0.0", auth=auth)  # type: ignore[arg-type]
    compose = cluster.deploy_configs()["deploy/nats/nats-1.conf"]
    # Same settings line for line; only addresses differ (and loopback nodes serve no HTTP).
    def settings(text: str) -> set[str]:
        return {line for line in text.splitlines() if not line.startswith("#")}

    differ = {line.split(":")[0].strip() for line in settings(loopback) ^ settings(compose)}
    assert differ <= {"listen", "http", "nats-route"}, differ
