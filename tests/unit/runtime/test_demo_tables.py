"""The demos' tables read as every command's do (muster.tables; docs/client.md): in a pipe,
plain columns with every value in full, one row a line. Walk of session 27: `muster demo --pool
| cat` printed boxes 80 columns wide, each holder cut over two lines (`n1000 of` / `dd392709`)."""

from __future__ import annotations

import io

from rich.console import Console

from muster.runtime.cli import show_layout
from muster.runtime.pool_demo import show_pool
from muster.runtime.real_demo import show_members

SERVICES = ["base", "hdfs-namenode", "yarn-resourcemanager", "zookeeper-server", "hdfs-datanode", "yarn-nodemanager"]


def _piped() -> tuple[Console, io.StringIO]:
    sink = io.StringIO()
    return Console(file=sink, force_terminal=False, width=80), sink


def test_the_pool_demo_table_keeps_each_host_on_one_line_in_a_pipe() -> None:
    console, sink = _piped()
    view = {"hosts": 2, "free": 1, "waiting": 1, "hosts_detail": [
        {"id": "lab-large-1", "address": "127.0.0.1", "port": 34249, "properties": {"cpu": 8, "labels": ["ssd"]}, "state": "assigned",
         "holder": {"node_id": "n1000", "cluster_id": "dd392709-0000-4000-8000-000000000000"}},
        {"id": "lab-small-1", "address": "127.0.0.1", "port": 33621, "properties": {"cpu": 2, "labels": []}, "state": "unassigned",
         "holder": None}]}
    show_pool(view, console)
    lines = sink.getvalue().splitlines()
    assert lines[0] == "pool lab: 2 hosts, 1 free, 1 waiting:"
    assert lines[1].split() == ["HOST", "ADDRESS", "CPU", "LABELS", "STATE", "HELD", "BY", "NODE"]
    assert lines[2].split() == ["lab-large-1", "127.0.0.1:34249", "8", "ssd", "assigned", "n1000", "of", "dd392709"]
    assert lines[3].split() == ["lab-small-1", "127.0.0.1:33621", "2", "unassigned"] and len(lines) == 4
    assert not any(box in sink.getvalue() for box in "┏│└")


def test_the_demo_layout_keeps_every_service_in_a_pipe() -> None:
    console, sink = _piped()
    show_layout({"nodes": 5, "layout": [{"count": 1, "hardwaretype": "small", "imagetype": "ubuntu22", "services": SERVICES}]}, console)
    lines = sink.getvalue().splitlines()
    assert lines[0] == "layout: 5 nodes:" and lines[2].endswith(", ".join(SERVICES)) and len(lines) == 3


def test_the_real_demo_table_names_every_node_also_where_the_provider_reports_no_hostname() -> None:
    """Without root (localhost nodes, which report no hostname of their own) the HOSTNAME column
    was empty, where `muster cluster show` gives the layout's."""
    from contracts.layout import NodeSpec
    from muster.readmodel.clusters import ClusterInfo

    nodes = [NodeSpec(id=n, hostname=f"nats-1-{n}.local", hardwaretype="node", imagetype="host", services=["nats"]) for n in ("n1000", "n1001")]
    info = ClusterInfo(id="c", name="nats-1", tenant="t", template="nats-cluster", provider="local", status="active", status_reason="",
                       job_id="j", config={}, nodes=nodes, ipaddresses={"n1000": {"access_v4": "127.77.0.2"}, "n1001": {"access_v4": "127.77.0.3"}},
                       hostnames={"n1001": "own-name"}, observed={("n1000", "nats"): "running", ("n1001", "nats"): "running"})
    console, sink = _piped()
    show_members(info, {"n1000": 2, "n1001": None}, console)
    lines = sink.getvalue().splitlines()
    assert lines[2].split() == ["n1000", "nats-1-n1000.local", "127.77.0.2", "2", "nats", "running"], lines
    assert lines[3].split() == ["n1001", "own-name", "127.77.0.3", "not", "answering", "nats", "running"], lines
