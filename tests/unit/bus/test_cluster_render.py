"""The distributed deployment and the loopback cluster test come from one description
(muster/bus/cluster.py): the checked-in files are exactly what it renders."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from muster.bus import cluster
from muster.tls.context import TlsError

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
            assert entry["environment"]["NATS_URL"].count("tls://") == len(cluster.NODES) and "nats://" not in entry["environment"]["NATS_URL"]
            assert entry["environment"]["MUSTER_TLS_CA"] == "/tls/ca.pem" and "tls:/tls:ro" in entry["volumes"]
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
    assert principals == {"admin", "solver", "planner", "tracker", "pool", "governance", "notifier", *cluster.provisioner_names()}


def test_loopback_nodes_are_rendered_like_the_compose_nodes(tmp_path: Path) -> None:
    nodes = cluster.loopback_cluster(tmp_path, [(14222, 16222), (14223, 16223), (14224, 16224)])
    from services.auth.keys import server_auth_config

    auth = server_auth_config("", "", from_env=True)
    loopback = cluster.render_node_config(nodes[0].address, nodes[0].peers, "/data/jetstream", "0.0.0.0", auth=auth,  # type: ignore[arg-type]
                                          tls=cluster.compose_tls("nats-1"))
    compose = cluster.deploy_configs()["deploy/nats/nats-1.conf"]
    # Same settings line for line; only addresses differ (and loopback nodes serve no HTTP).
    def settings(text: str) -> set[str]:
        return {line for line in text.splitlines() if not line.startswith("#")}

    differ = {line.split(":")[0].strip() for line in settings(loopback) ^ settings(compose)}
    assert differ <= {"listen", "https", "nats-route"}, differ


def test_every_hop_of_compose_is_tls_with_the_ca_key_kept_apart() -> None:
    for rel, text in cluster.deploy_configs().items():
        node = rel.rsplit("/", 1)[1].removesuffix(".conf")
        client, route = text.split("cluster {")
        # The client port: TLS first, this node's own certificate; the routes: both ends verified.
        assert f'cert_file: "/tls/servers/{node}.pem"' in client and "handshake_first: true" in client, rel
        assert "https: 0.0.0.0:8222" in client and "http: " not in client, rel
        assert f'cert_file: "/tls/servers/{node}.pem"' in route and "verify: true" in route, rel
    services = yaml.safe_load(cluster.render_compose())["services"]
    issuer = services["tls"]
    assert issuer["command"][:6] == ["tls", "issue", "--dir", "/ca", "--out", "/tls"]
    assert {spec.split("=")[0] for spec in issuer["command"][6:]} == {*cluster.NODES, "tracker"}
    for name, entry in services.items():
        mounts = entry.get("volumes", [])
        assert name == "tls" or not any(m.startswith("tls-ca:") for m in mounts), f"{name} can read the CA's key"
    for node in cluster.NODES:
        assert services[node]["depends_on"] == {"tls": {"condition": "service_completed_successfully"}}
    tracker = services["tracker"]["command"]
    assert tracker[tracker.index("--tls-cert") + 1] == "/tls/servers/tracker.pem" and "--insecure-network" not in tracker


def test_a_node_listening_beyond_loopback_without_tls_is_refused() -> None:
    node = cluster.compose_nodes()[0]
    with pytest.raises(TlsError, match="refusing to listen on 0.0.0.0 without TLS"):
        cluster.render_node_config(node, cluster.compose_nodes(), "/data", "0.0.0.0")
    assert "listen: 127.0.0.1:4222" in cluster.render_node_config(node, cluster.compose_nodes(), "/data", "127.0.0.1")


def test_compose_runs_every_service_muster_up_runs() -> None:
    """compose.yaml lacked the governance service and the notifier: approval rules, policies,
    schedules and notifications had no one to answer them there."""
    from muster.runtime.supervisor import SERVICES

    services = cluster.compose_document()["services"]
    assert isinstance(services, dict)
    ran = {name.split("-")[0] if name.startswith("provisioner-") else name for name in services}
    assert {*SERVICES, "pool", "auth"} <= ran


def test_compose_planners_take_their_policy_deadline_from_the_operators_env() -> None:
    """An operator sets the deadline in `.env` (compose.yaml is generated; nobody edits it), and
    the planner reads that variable as its --policy-deadline (docs/governance.md)."""
    from services.governance.domain.deadline import POLICY_DEADLINE_ENV, POLICY_DEADLINE_S
    from services.planner import entrypoint

    planner = yaml.safe_load(cluster.render_compose())["services"]["planner"]
    assert planner["environment"][POLICY_DEADLINE_ENV] == f"${{{POLICY_DEADLINE_ENV}:-{POLICY_DEADLINE_S:g}}}"
    option = next(p for p in entrypoint.main.params if p.name == "policy_deadline")
    assert option.envvar == POLICY_DEADLINE_ENV
    assert "MUSTER_POLICY_DEADLINE" not in str(yaml.safe_load(cluster.render_compose())["services"]["solver"])
