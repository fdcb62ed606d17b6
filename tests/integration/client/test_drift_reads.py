"""The drift says what the repair does, on every read path (the user's report: `muster cluster
drift` said `reinstall` for a namenode that failed while zookeeper, which it needs running, was
stopped, and the repair only started it). A real planner, provisioner and tracker; the drift
read by the `muster` commands, over HTTP, in the console, from a replay and by the Python client,
and the repair's dry run planning exactly that."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contracts.commands import CheckCluster, CreateCluster
from services.provisioner.plugins.builtin.simulated_automator.automator import SimulatedAutomator

from .conftest import muster

pytestmark = [pytest.mark.nats, pytest.mark.timeout(240), pytest.mark.usefixtures("fast")]
Stack = Any


async def _ok(stack: Stack, command: Any) -> str:
    reply = await stack.client.request(command)
    final = await stack.client.wait(reply.job_id, timeout=90)
    assert final.type == "JobSucceeded", final
    return str(reply.cluster_id)


async def test_a_service_failed_while_what_it_needs_is_down_is_started_after_it_on_every_read_path(stack: Stack, fresh_nats: str) -> None:
    cid = await _ok(stack, CreateCluster(name="drifty", template="hadoop-small", nodes=3))
    cluster = stack.planner.clusters[cid]
    [node] = [n.id for n in cluster.nodes.values() if "zookeeper-server" in n.services]
    [nn] = [n.id for n in cluster.nodes.values() if "hdfs-namenode" in n.services]
    automator = stack.workers.executor.inner.automator("simulated")
    assert isinstance(automator, SimulatedAutomator)
    automator.states[(cid, node, "zookeeper-server")] = "stopped"  # killed
    automator.states[(cid, nn, "hdfs-namenode")] = "failed"  # it needs zookeeper running
    await _ok(stack, CheckCluster(cluster_id=cid))

    expected = sorted([
        {"node": node, "service": "zookeeper-server", "desired": "running", "observed": "stopped", "repair": "start", "after": []},
        {"node": nn, "service": "hdfs-namenode", "desired": "running", "observed": "failed", "repair": "start",
         "after": ["zookeeper-server"]}], key=lambda d: (d["node"], d["service"]))
    drift = json.loads((await muster(fresh_nats, "cluster", "drift", "drifty", "--json")).stdout)
    assert drift["drift"] == expected
    shown = json.loads((await muster(fresh_nats, "cluster", "show", "drifty", "--json")).stdout)
    assert shown["drift"] == expected
    text = await muster(fresh_nats, "cluster", "drift", "drifty")
    assert f"{nn} hdfs-namenode: failed, should be running -> start it after zookeeper-server, down too" in text.stdout, text.stdout
    assert "install, configure and start it again" not in text.stdout

    view = await (await stack.http.get(f"/v1/clusters/{cid}")).json()
    assert view["drift"] == expected
    replayed = json.loads((await muster(fresh_nats, "replay", "--cluster", "drifty", "--json")).stdout)
    assert replayed["cluster"]["drift"] == expected
    said = (await muster(fresh_nats, "replay", "--cluster", "drifty")).stdout
    assert f"{nn:<8} hdfs-namenode: failed, should be running (repair: start after zookeeper-server)" in said, said
    page = await (await stack.http.get(f"/ui/clusters/{cid}")).text()
    assert "(repair: start, after zookeeper-server, down too)" in page and "(repair: reinstall" not in page
    assert [d.to_json() for d in (await stack.client.cluster(cid)).drift] == expected

    # What the repair plans: the namenode started after zookeeper, not installed again.
    dry = await muster(fresh_nats, "cluster", "repair", "drifty", "--dry-run")
    assert dry.code == 0, dry.stderr
    stages = [line.split(": ", 1)[1] for line in dry.stdout.splitlines() if line.strip().startswith("stage ")]
    assert not any("install" in s or "configure" in s for s in stages), stages
    assert stages.index("1× start zookeeper-server") < stages.index("1× start hdfs-namenode"), stages
