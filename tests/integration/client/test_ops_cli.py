"""`muster cluster ...` and `muster job ...` as a user runs them, against the four services."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contracts import subjects
from contracts.catalog import Catalog, Provider
from contracts.commands import CreateCluster, Rejected
from muster.bus.connect import connect
from muster.catalog.store import apply_catalog

from .conftest import muster

pytestmark = [pytest.mark.nats, pytest.mark.timeout(240), pytest.mark.usefixtures("fast")]
Stack = Any
DEMO = Path(__file__).parents[3] / "muster" / "demo" / "catalog"


def _lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


async def test_dry_run_create_wait_list_show_delete(stack: Stack, fresh_nats: str) -> None:
    dry = await muster(fresh_nats, "cluster", "create", "web", "-t", "hadoop-small", "-n", "4", "--dry-run")
    assert dry.code == 0, dry.stderr
    assert "dry run of create: nothing was executed; the plan is saved" in dry.stdout
    assert "layout: 4 nodes" in dry.stdout and "stage 1:" in dry.stdout and "create" in dry.stdout
    assert (await stack.store.read(f"muster.evt.{stack.tenant}.cluster.*")) == []

    # a real process for `cluster` (the other commands here run in the test's process: tests/cli_in_process.py)
    created = await muster(fresh_nats, "cluster", "create", "web", "-t", "hadoop-small", "-n", "3", "--wait", process=True)
    assert created.code == 0, created.stderr
    assert "create accepted: job " in created.stdout and "succeeded" in created.stdout

    listing = json.loads((await muster(fresh_nats, "cluster", "list", "--json")).stdout)
    assert [(c["name"], c["status"], c["nodes"]) for c in listing] == [("web", "active", 3)]
    shown = json.loads((await muster(fresh_nats, "cluster", "show", "web", "--json")).stdout)
    assert shown["id"] == listing[0]["id"] and len(shown["nodes"]) == 3
    assert all(n["ipaddresses"] for n in shown["nodes"]) and "hdfs-namenode" in shown["services"]
    table = await muster(fresh_nats, "cluster", "show", "web")
    assert "status: active" in table.stdout and "nodes: 3" in table.stdout
    rows = [line.split() for line in table.stdout.splitlines() if line.startswith("n")]  # not a terminal: plain columns
    assert [r[0] for r in rows] == [n["id"] for n in shown["nodes"]] and "…" not in table.stdout

    deleted = await muster(fresh_nats, "cluster", "delete", "web", "--wait", "--json")
    assert deleted.code == 0, deleted.stderr
    reply, final = _lines(deleted.stdout)
    assert reply["type"] == "Accepted" and final["type"] == "JobSucceeded"
    assert json.loads((await muster(fresh_nats, "cluster", "list", "--json")).stdout) == []
    everything = json.loads((await muster(fresh_nats, "cluster", "list", "--all", "--json")).stdout)
    assert [c["status"] for c in everything] == ["deleted"]


async def test_every_cluster_operation_from_the_command_line(stack: Stack, fresh_nats: str) -> None:
    created = await muster(fresh_nats, "cluster", "create", "ops", "-t", "hadoop-small", "-n", "3", "--wait", "--json")
    assert created.code == 0, created.stderr
    create_job = _lines(created.stdout)[0]["job_id"]
    steps: list[list[str]] = [
        ["expand", "ops", "--add", "1"],
        ["shrink", "ops", "--nodes", "3"],
        ["remove-services", "ops", "yarn-nodemanager"],
        ["add-services", "ops", "yarn-nodemanager"],
        ["configure", "ops", '{"hdfs": {"replication": 1}, "motd": "[bold]hi[/bold]"}', "--restart"],
        ["stop", "ops", "hdfs-namenode"],
        ["start", "ops"],
        ["restart", "ops", "zookeeper-server"],
    ]
    jobs: dict[str, str] = {}
    for step in steps:
        result = await muster(fresh_nats, "cluster", *step, "--wait", "--json")
        assert result.code == 0, (step, result.stdout, result.stderr)
        assert [d["type"] for d in _lines(result.stdout)] == ["Accepted", "JobSucceeded"], step
        jobs[step[0]] = _lines(result.stdout)[0]["job_id"]
    # --restart writes each node's config before it stops the service there
    queued = [(r.event.node, r.event.service, r.event.action.value)
              for r in await stack.store.read_many(subjects.job_filters(stack.tenant, jobs["configure"])) if r.type == "TaskQueued"]
    stops = [(n, s) for n, s, a in queued if a == "stop"]
    assert stops and all(queued.index((n, s, "configure")) < queued.index((n, s, "stop")) for n, s in stops), queued
    shown = json.loads((await muster(fresh_nats, "cluster", "show", "ops", "--json")).stdout)
    assert len(shown["nodes"]) == 3 and shown["config"] == {"hdfs": {"replication": 1}, "motd": "[bold]hi[/bold]"}
    told = (await muster(fresh_nats, "cluster", "show", "ops")).stdout  # as typed: JSON, brackets kept (not rich markup)
    assert '   config: {"hdfs": {"replication": 1}, "motd": "[bold]hi[/bold]"}' in told.splitlines(), told
    dry = await muster(fresh_nats, "cluster", "expand", "ops", "--nodes", "5", "--dry-run", "--json")
    assert dry.code == 0 and _lines(dry.stdout)[0]["layout"]["nodes"] == 5
    assert create_job


async def test_upgrade_from_the_command_line(stack: Stack, fresh_nats: str) -> None:
    created = await muster(fresh_nats, "cluster", "create", "up", "-t", "hadoop-small", "-n", "2", "--wait")
    assert created.code == 0, created.stderr
    upgrade = await muster(fresh_nats, "cluster", "upgrade", "up", "hdfs-datanode", "--wait", process=True)
    assert upgrade.code == 0 and "succeeded" in upgrade.stdout, upgrade.stderr
    assert "━" not in upgrade.stderr + created.stderr  # a bar is for a terminal: in a pipe its last frame was cut to 80 columns


async def test_rollback_from_the_command_line(stack: Stack, fresh_nats: str) -> None:
    created = await muster(fresh_nats, "cluster", "create", "rb", "-t", "hadoop-small", "-n", "2", "--wait")
    assert created.code == 0, created.stderr
    expanded = await muster(fresh_nats, "cluster", "expand", "rb", "--add", "1", "--wait", "--json")
    expand_job = _lines(expanded.stdout)[0]["job_id"]
    rollback = await muster(fresh_nats, "cluster", "rollback", "rb", "--to-job", expand_job, "--wait")
    assert rollback.code == 0, rollback.stderr
    shown = json.loads((await muster(fresh_nats, "cluster", "show", "rb", "--json")).stdout)
    assert len(shown["nodes"]) == 2


async def test_job_control_and_exit_codes(stack: Stack, fresh_nats: str) -> None:
    slow = Provider(name="sim", providertype="simulated", provisioner={"latency_ms": "400"})  # time to pause it
    await apply_catalog(stack.store, stack.tenant, Catalog(providers={"sim": slow}))
    accepted = await muster(fresh_nats, "cluster", "create", "slow", "-t", "hadoop-small", "-n", "2", "--json")
    job_id = _lines(accepted.stdout)[0]["job_id"]
    paused = await muster(fresh_nats, "job", "pause", job_id, "--wait", process=True)  # a real process for `job`
    assert paused.code == 0 and f"job {job_id} is paused" in paused.stdout, paused.stderr
    cluster_id = _lines(accepted.stdout)[0]["cluster_id"]  # by the name people gave it (it was the id alone)
    assert f"pause accepted: job {job_id}, cluster slow ({cluster_id})" in paused.stdout, paused.stdout
    again = await muster(fresh_nats, "job", "pause", job_id, process=True)
    assert again.code == 2 and again.stderr.startswith("Error: pause rejected: ") and "Traceback" not in again.stderr
    resumed = await muster(fresh_nats, "job", "resume", job_id, "--wait")
    assert resumed.code == 0 and f"job {job_id} succeeded" in resumed.stdout, resumed.stderr
    waited = await muster(fresh_nats, "job", "wait", job_id, "--json")
    assert waited.code == 0 and _lines(waited.stdout)[-1]["type"] == "JobSucceeded"


async def test_a_repeated_job_control_request_waits_on_its_job_to_the_end_it_had(stack: Stack, fresh_nats: str) -> None:
    """`muster job cancel J --request-id K --wait` sent again after its job was rolled back said
    "same job, which rolled back", then waited out --timeout for an end that had come (exit 3,
    "has not ended ... it goes on without us"; by default an hour): it followed the job from the
    log's end, and the tracker's story of an ended job followed from after its end never ended."""
    slow = Provider(name="sim", providertype="simulated", provisioner={"latency_ms": "400"})  # time to cancel it
    await apply_catalog(stack.store, stack.tenant, Catalog(providers={"sim": slow}))
    accepted = await muster(fresh_nats, "cluster", "create", "gone", "-t", "hadoop-small", "-n", "2", "--json")
    job_id = _lines(accepted.stdout)[0]["job_id"]
    cancel = ("job", "cancel", job_id, "--request-id", "cancel-gone", "--wait", "--timeout", "60")
    first = await muster(fresh_nats, *cancel)
    assert first.code == 1 and f"Error: job {job_id} was rolled back: cancelled by " in first.stderr, first.stderr
    again = await muster(fresh_nats, *cancel)
    assert "(a repeat of an earlier request: same job, which rolled back" in again.stdout, again.stdout
    assert again.code == 1 and f"Error: job {job_id} was rolled back: cancelled by " in again.stderr, again.stderr


async def test_a_job_that_does_not_succeed_exits_1(stack: Stack, fresh_nats: str, tmp_path: Any) -> None:
    template = json.loads((DEMO / "clustertemplates" / "hadoop-small.json").read_text())
    template["compatibility"]["services"].append("broken")
    bundle = tmp_path / "broken.json"
    bundle.write_text(json.dumps({"clustertemplates": [template], "services": [{
        "name": "broken", "provisioner": {"actions": {"install": {"type": "simulated", "fields": {"failure_rate": "1"}}}}}]}))
    applied = await muster(fresh_nats, "catalog", "apply", str(bundle))
    assert applied.code == 0, applied.stderr
    assert (await muster(fresh_nats, "cluster", "create", "b", "-t", "hadoop-small", "-n", "2", "--wait")).code == 0
    failed = await muster(fresh_nats, "cluster", "add-services", "b", "broken", "--wait")
    assert failed.code == 1, failed.stderr
    job_id = failed.stdout.split("job ", 1)[1].split(",")[0]
    assert f"Error: job {job_id} was rolled back: task " in failed.stderr
    retried = await muster(fresh_nats, "job", "retry", job_id, "--wait", "--json")
    assert retried.code == 1 and [d["type"] for d in _lines(retried.stdout)] == ["Accepted", "JobRolledBack"]


async def test_bad_requests_are_one_sentence(stack: Stack, fresh_nats: str) -> None:
    rejected = await muster(fresh_nats, "cluster", "create", "x", "-t", "nope", "-n", "3")
    assert rejected.code == 2 and rejected.stderr.strip() == "Error: create rejected (--template): unknown cluster template 'nope'"
    unknown = await muster(fresh_nats, "cluster", "expand", "ghost", "--add", "1")
    assert unknown.code == 2 and unknown.stderr.strip() == "Error: no cluster named 'ghost' in tenant default"
    bad_json = await muster(fresh_nats, "cluster", "configure", "ghost", "{nope")
    assert bad_json.code == 2 and "CONFIG: not valid JSON" in bad_json.stderr
    blind = await muster(fresh_nats, "cluster", "create", "blind", "-t", "hadoop-small", "-n", "2", "--wait",
                         MUSTER_TRACKER_URL="http://127.0.0.1:9")  # accepted, then nothing to follow it through
    assert blind.code == 3 and "create accepted: job" in blind.stdout
    assert "cannot reach the tracker at http://127.0.0.1:9" in blind.stderr and "goes on without us (`muster watch" in blind.stderr
    usage = await muster(fresh_nats, "cluster", "create", "x", "-t", "t")
    assert usage.code == 2 and "Missing option '--nodes'" in usage.stderr


async def test_a_service_missing_what_it_requires_is_refused_before_anything_is_recorded(stack: Stack, fresh_nats: str) -> None:
    """`--services base,yarn-nodemanager` (no yarn-resourcemanager) was accepted: a cluster was
    made and its job failed a moment later (`no layout: ...`). Refused at admission, over the CLI
    and a plain bus request alike, at the field; no ClusterRequested, no job."""
    said = "yarn-nodemanager requires yarn-resourcemanager, which no service on the cluster is or provides"
    refused = await muster(fresh_nats, "cluster", "create", "w2", "-t", "hadoop-small", "-n", "3", "--services", "base,yarn-nodemanager")
    assert refused.code == 2 and refused.stderr.strip() == f"Error: create rejected (--services): {said}", refused
    nc = await connect(fresh_nats, name="test-bus")
    try:
        body = CreateCluster(name="w2", template="hadoop-small", nodes=3, services=["base", "yarn-nodemanager"])
        answer = await nc.request(subjects.operation(stack.tenant, "test-system", "create"), body.model_dump_json().encode(), timeout=30)
    finally:
        await nc.close()
    reply = Rejected.model_validate_json(answer.data)
    assert (reply.code, reply.field, reply.reason) == ("invalid", "services", said), reply
    assert await stack.store.read(f"muster.evt.{stack.tenant}.cluster.*") == []
    assert await stack.store.read(f"muster.evt.{stack.tenant}.job.*") == []
    # add-services: onto a cluster without yarn, yarn-nodemanager alone.
    made = await muster(fresh_nats, "cluster", "create", "zk", "-t", "hadoop-small", "-n", "2", "--services", "base,zookeeper-server", "--wait")
    assert made.code == 0, made.stderr
    jobs = len(await stack.store.read(f"muster.evt.{stack.tenant}.job.*"))
    added = await muster(fresh_nats, "cluster", "add-services", "zk", "yarn-nodemanager")
    assert added.code == 2 and added.stderr.strip() == f"Error: add-services rejected (SERVICES): {said}", added
    assert len(await stack.store.read(f"muster.evt.{stack.tenant}.job.*")) == jobs
