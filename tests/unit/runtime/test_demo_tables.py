"""The demos' tables read as every command's do (muster.tables; docs/client.md): in a pipe,
plain columns with every value in full, one row a line. Walk of session 27: `muster demo --pool
| cat` printed boxes 80 columns wide, each holder cut over two lines (`n1000 of` / `dd392709`)."""

from __future__ import annotations

import io

from rich.console import Console

from muster.runtime.cli import show_layout
from muster.runtime.pool_demo import show_pool

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
