"""Planner rules that used to run against a real bus (tests/integration/services), now on the
in-memory fakes: the same requests, the same assertions, no nats-server and no wall time."""

from __future__ import annotations

import pytest
from planner_harness import Harness, body, demo_catalog

from contracts import subjects
from contracts.commands import (
    Accepted,
    AddServices,
    CancelJob,
    ConfigureCluster,
    CreateCluster,
    DryRun,
    ExpandCluster,
    PauseJob,
    Rejected,
    RemoveServices,
    RepairCluster,
    RestartServices,
    ResumeJob,
    RetryJob,
    RollbackCluster,
    ShrinkCluster,
    StartServices,
    StopServices,
    UpgradeService,
)
from contracts.events import JobRolledBack, JobSucceeded, ServiceChange
from muster.readmodel import lifecycle
from muster.readmodel.clusters import cluster_view

BROKEN = {"provisioner": {"actions": {
    "install": {"type": "simulated", "fields": {"failure_rate": "1"}},
    "remove": {"type": "simulated", "fields": {}},
}}}


async def test_remove_and_add_services(h: Harness) -> None:
    cid = await h.cluster_of(3)
    await h.ok(RemoveServices(cluster_id=cid, services=["yarn-nodemanager"]))
    assert all("yarn-nodemanager" not in s for s in h.services(cid).values())
    await h.ok(AddServices(cluster_id=cid, services=["yarn-nodemanager"]))
    assert sum("yarn-nodemanager" in s for s in h.services(cid).values()) == 2


async def test_configure_stop_restart(h: Harness) -> None:
    cid = await h.cluster_of(2)
    await h.ok(ConfigureCluster(cluster_id=cid, config={"hdfs": {"replication": 1}}, restart=True))
    assert h.cluster(cid).config == {"hdfs": {"replication": 1}}
    await h.ok(StopServices(cluster_id=cid, services=["hdfs-namenode"]))
    await h.ok(RestartServices(cluster_id=cid))


async def test_configure_restart_writes_the_config_before_it_stops_the_service(h: Harness) -> None:
    """A config a node refuses stops nothing there: the service keeps running on the old one
    while the configure is retried, and the rollback does not have to start it again."""
    cid = await h.cluster_of(3)
    ok = await h.ok(ConfigureCluster(cluster_id=cid, config={"hdfs": {"replication": 1}}, restart=True))
    queued = [(e.node, e.service, e.action.value) for e in h.events(ok.job_id, "TaskQueued")]
    for node, service, action in queued:
        if action == "stop":
            assert queued.index((node, service, "configure")) < queued.index((node, service, "stop"))
    bad = sorted(h.cluster(cid).nodes)[1]
    h.behaviour = lambda m: "fail" if m.node.id == bad and m.action.value == "configure" else "succeed"
    reply = await h.send(ConfigureCluster(cluster_id=cid, config={"hdfs": {"replication": 9}}, restart=True))
    assert isinstance(reply, Accepted), reply
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobRolledBack) and h.cluster(cid).config == {"hdfs": {"replication": 1}}
    job = h.job(reply.job_id)  # what ran there (with segments, its stops were queued with the configures, never run)
    assert [job.tasks[t].action.value for t, _ in h.claimed(reply.job_id) if job.tasks[t].node == bad] == ["bootstrap", *["configure"] * 3]
    [rollback] = h.events(reply.job_id, "RollbackPlanned")
    assert not [t for t in rollback.tasks if t.node == bad]  # nothing ran there to undo


async def test_busy_cluster_and_bad_operations_are_rejected(h: Harness) -> None:
    cid = await h.cluster_of(2)
    for command, expected in [
        (ExpandCluster(cluster_id=cid, nodes=2), "more than the cluster's 2 nodes"),
        (ShrinkCluster(cluster_id=cid, nodes=5), "fewer than"),
        (AddServices(cluster_id=cid, services=["base"]), "already on the cluster"),
        (RemoveServices(cluster_id=cid, services=["nope"]), "not on the cluster"),
        # refused at once, as the solver would a moment later (it was accepted, then the job failed)
        (RemoveServices(cluster_id=cid, services=sorted(set().union(*h.services(cid).values()))), "removing every service ("),
        (ExpandCluster(cluster_id="no-such", nodes=3), "no cluster no-such in tenant default"),
        (CancelJob(job_id="no-such"), "unknown job"),
    ]:
        reply = await h.send(command)
        assert isinstance(reply, Rejected) and expected in reply.reason, (command, reply)
    first = await h.send(ExpandCluster(cluster_id=cid, nodes=3))
    assert isinstance(first, Accepted)
    busy = await h.send(ExpandCluster(cluster_id=cid, nodes=4))
    assert isinstance(busy, Rejected) and "busy" in busy.reason
    await h.settle()


async def test_a_task_out_of_attempts_rolls_the_job_back() -> None:
    h = Harness(catalog=demo_catalog(broken=BROKEN))
    h.behaviour = lambda m: "fail" if m.service is not None and m.service.name == "broken" and m.action.value == "install" else "succeed"
    cid = await h.cluster_of(2)
    before = h.services(cid)

    reply = await h.send(AddServices(cluster_id=cid, services=["broken"]))
    assert isinstance(reply, Accepted), reply
    await h.settle()
    final = h.final(reply.job_id)
    assert isinstance(final, JobRolledBack) and "failed 3 times" in final.reason
    assert h.services(cid) == before and h.cluster(cid).status == "active"
    history = h.history(reply.job_id)
    assert history.count("TaskAttemptFailed") >= 2 and "RollbackPlanned" in history

    retried = await h.send(RetryJob(job_id=reply.job_id))
    assert isinstance(retried, Accepted)
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobRolledBack)


async def test_cancel_mid_create_rolls_back_every_machine(h: Harness) -> None:
    h.behaviour = lambda m: "hold"
    reply = await h.send(CreateCluster(name="cancelled", template="hadoop-small", nodes=3))
    assert isinstance(reply, Accepted)
    await h.settle()
    create = next(m for m in h.held if m.task_id.endswith(".create"))
    h.held.remove(create)
    await h.work(create, "succeed")  # one machine exists
    await h.settle()
    assert isinstance(await h.send(CancelJob(job_id=reply.job_id)), Accepted)
    h.behaviour = lambda m: "succeed"
    await h.release()
    final = h.final(reply.job_id)
    assert isinstance(final, JobRolledBack) and "cancelled" in final.reason
    cluster = h.cluster(reply.cluster_id)
    assert cluster.status == "failed" and cluster.nodes == {}
    deletes = [t for t in h.job(reply.job_id).task_state if t.startswith("undo.") and t.endswith(".delete")]
    assert deletes and all(h.job(reply.job_id).task_state[t] == "succeeded" for t in deletes)


async def test_pause_and_resume(h: Harness) -> None:
    h.behaviour = lambda m: "hold"
    reply = await h.send(CreateCluster(name="paused", template="hadoop-small", nodes=2))
    assert isinstance(reply, Accepted)
    await h.settle()
    assert isinstance(await h.send(PauseJob(job_id=reply.job_id)), Accepted)
    again = await h.send(PauseJob(job_id=reply.job_id))
    assert isinstance(again, Rejected) and again.reason == f"job {reply.job_id} is paused already"
    h.behaviour = lambda m: "succeed"
    await h.release()
    assert h.job(reply.job_id).view()["state"] == "paused"  # in-flight tasks finished; nothing new
    assert isinstance(await h.send(ResumeJob(job_id=reply.job_id)), Accepted)
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobSucceeded)
    history = h.history(reply.job_id)
    assert history.index("JobPaused") < history.index("JobResumed")


async def test_rollback_to_the_state_before_a_job(h: Harness) -> None:
    cid = await h.cluster_of(2)
    original = h.services(cid)
    config = dict(h.cluster(cid).config)
    expand = await h.ok(ExpandCluster(cluster_id=cid, nodes=3))
    await h.ok(RemoveServices(cluster_id=cid, services=["yarn-nodemanager"]))
    await h.ok(ConfigureCluster(cluster_id=cid, config={"changed": True}))

    dry = await h.send(RollbackCluster(cluster_id=cid, to_job=expand.job_id, dry_run=True))
    assert isinstance(dry, DryRun) and dry.layout is not None and dry.layout.nodes == 2
    actions = {t["action"] for t in dry.plan["tasks"]}
    assert {"delete", "install", "configure"} <= actions

    await h.ok(RollbackCluster(cluster_id=cid, to_job=expand.job_id))
    assert h.services(cid) == original
    assert h.cluster(cid).config == config
    again = await h.send(RollbackCluster(cluster_id=cid, to_job=expand.job_id))
    assert isinstance(again, Rejected) and "already as it was" in again.reason


async def test_rollback_restarts_what_runs_with_the_config_put_back_and_restores_stopped_and_running(h: Harness) -> None:
    cid = await h.cluster_of(2)
    config = dict(h.cluster(cid).config)
    await h.ok(StopServices(cluster_id=cid, services=["yarn-nodemanager"]))
    stopped = list(h.cluster(cid).stopped)
    source = await h.ok(ConfigureCluster(cluster_id=cid, config={"changed": True}))
    await h.ok(StartServices(cluster_id=cid, services=["yarn-nodemanager"]))
    await h.ok(StopServices(cluster_id=cid, services=["hdfs-datanode"]))  # (nothing depends on it)
    assert h.cluster(cid).stopped == ["hdfs-datanode"] != stopped

    back = await h.ok(RollbackCluster(cluster_id=cid, to_job=source.job_id))
    assert h.cluster(cid).config == config and h.cluster(cid).stopped == stopped
    tasks = {(t.action.value, t.service) for t in h.job(back.job_id).tasks.values()}
    # Running services are restarted with the config put back (no start of a service meant to be stopped)...
    assert {("stop", "zookeeper-server"), ("configure", "zookeeper-server"), ("start", "zookeeper-server")} <= tasks
    assert ("start", "yarn-nodemanager") not in tasks and ("configure", "yarn-nodemanager") in tasks
    # ...a service stopped since is started again (restarted), and one stopped before the
    # source job is stopped again.
    assert ("start", "hdfs-datanode") in tasks and ("stop", "yarn-nodemanager") in tasks


async def test_rollback_past_an_upgrade_is_refused_naming_it(h: Harness) -> None:
    cid = await h.cluster_of(2)
    source = await h.ok(ConfigureCluster(cluster_id=cid, config={"changed": True}))
    upgrade = await h.ok(UpgradeService(cluster_id=cid, service="zookeeper-server"))
    refused = await h.send(RollbackCluster(cluster_id=cid, to_job=source.job_id))
    assert isinstance(refused, Rejected) and refused.field == "to_job"
    assert f"job {upgrade.job_id} upgraded zookeeper-server since" in refused.reason and "older version" in refused.reason
    assert f"job {upgrade.job_id}" in (await h.send(RollbackCluster(cluster_id=cid, to_job=upgrade.job_id))).reason  # (it too)
    after = await h.ok(ConfigureCluster(cluster_id=cid, config={"again": True}))
    await h.ok(RollbackCluster(cluster_id=cid, to_job=after.job_id))  # a job after the upgrade: fine
    assert h.cluster(cid).config == {"changed": True}


def _lives(h: Harness, cid: str) -> dict[tuple[str, str], tuple[str, bool]]:
    """Each (node, service): its state, and whether it runs with a config other than the cluster's."""
    cluster = h.cluster(cid)
    old = lifecycle.outdated(cluster.services_state, cluster.config)
    return {k: (v[0], k in old) for k, v in cluster.services_state.items()}


async def test_each_service_on_each_node_is_a_state_machine_that_a_config_change_makes_outdated(h: Harness) -> None:
    cid = await h.cluster_of(2)
    pairs = {(n, s) for n, spec in h.cluster(cid).nodes.items() for s in spec.services if s != "base"}
    base = {(n, "base") for n in h.cluster(cid).nodes}  # no start action: configured, never running
    lives = _lives(h, cid)
    assert set(lives) == pairs | base and {lives[k] for k in pairs} == {("running", False)}
    assert {lives[k] for k in base} == {("configured", False)}
    await h.ok(ConfigureCluster(cluster_id=cid, config={"changed": True}))  # no restart
    lives = _lives(h, cid)
    assert {lives[k] for k in pairs} == {("running", True)} and {lives[k] for k in base} == {("configured", False)}
    await h.ok(RestartServices(cluster_id=cid, services=["hdfs-datanode"]))  # (and what depends on it: nothing)
    lives = _lives(h, cid)
    assert {v for k, v in lives.items() if k[1] == "hdfs-datanode"} == {("running", False)}
    assert lives[next(k for k in pairs if k[1] == "zookeeper-server")] == ("running", True)
    await h.ok(StopServices(cluster_id=cid, services=["hdfs-datanode"]))
    assert {v for k, v in _lives(h, cid).items() if k[1] == "hdfs-datanode"} == {("stopped", False)}
    # The read model folds the same states from the cluster's events.
    view = cluster_view([r for r in h.log.records if r.subject == subjects.cluster_events("default", cid)])
    assert view is not None
    assert {(n["id"], s): (v["state"], v["outdated"]) for n in view["nodes"] for s, v in n["lifecycle"].items()} == _lives(h, cid)


async def test_a_config_put_back_by_a_rollback_makes_the_services_that_kept_it_current_again(h: Harness) -> None:
    cid = await h.cluster_of(2)
    h.behaviour = lambda m: "fail" if (m.action.value == "start" and m.service is not None and m.service.name == "zookeeper-server"
                                       and not m.task_id.startswith("undo.")) else "succeed"
    failed = await h.send(ConfigureCluster(cluster_id=cid, config={"bad": True}, restart=True))
    await h.settle()
    assert isinstance(h.final(failed.job_id), JobRolledBack)
    assert not any(old for _, old in _lives(h, cid).values())  # every service runs the config that is the cluster's again


async def test_an_outdated_service_is_drift_that_a_repair_restarts(h: Harness) -> None:
    cid = await h.cluster_of(2)
    await h.ok(ConfigureCluster(cluster_id=cid, config={"changed": True}))  # no restart
    drift = h.cluster(cid).drift()
    assert drift and {(d.observed, d.repair) for d in drift} == {("outdated", "restart")}
    assert {(d.node, d.service) for d in drift} == {k for k, (_, old) in _lives(h, cid).items() if old}
    repair = await h.ok(RepairCluster(cluster_id=cid))
    assert {t.action.value for t in h.job(repair.job_id).tasks.values()} >= {"stop", "start"}
    assert h.cluster(cid).drift() == [] and not any(old for _, old in _lives(h, cid).values())


async def test_a_plan_the_service_states_do_not_allow_is_refused(h: Harness) -> None:
    cid = await h.cluster_of(2)
    node = next(n for n, spec in h.cluster(cid).nodes.items() if "hdfs-datanode" in spec.services)
    # A state reached outside the planner's plans (here: set by hand): installed, never configured.
    h.cluster(cid).services_moved("manual", [ServiceChange(service="hdfs-datanode", state="installed", nodes=[node])])
    refused = await h.send(StartServices(cluster_id=cid, services=["hdfs-datanode"]))
    assert isinstance(refused, Rejected) and refused.reason == (
        f"cannot plan start: cannot start hdfs-datanode on {node}: it is installed, never configured")


async def test_a_repeated_job_control_request_gets_the_first_answer(h: Harness) -> None:
    h.behaviour = lambda m: "hold"
    reply = await h.send(CreateCluster(name="ctl", template="hadoop-small", nodes=2))
    assert isinstance(reply, Accepted)
    first = await h.send(PauseJob(job_id=reply.job_id, request_id="pause-once"))
    again = await h.send(PauseJob(job_id=reply.job_id, request_id="pause-once"))
    assert isinstance(first, Accepted) and not first.duplicate
    assert isinstance(again, Accepted) and again.duplicate
    other = await h.send(PauseJob(job_id=reply.job_id, request_id="pause-twice"))
    assert isinstance(other, Rejected)
    assert isinstance(await h.send(ResumeJob(job_id=reply.job_id)), Accepted)
    h.behaviour = lambda m: "succeed"
    await h.release()
    assert isinstance(h.final(reply.job_id), JobSucceeded)


async def test_a_repeated_request_id_maps_to_the_same_job(h: Harness) -> None:
    first = await h.send(CreateCluster(name="c1", template="hadoop-small", nodes=3, request_id="once"))
    again = await h.send(CreateCluster(name="c1", template="hadoop-small", nodes=3, request_id="once"))
    assert isinstance(first, Accepted) and isinstance(again, Accepted)
    assert again.job_id == first.job_id and again.duplicate
    await h.settle()
    jobs = await h.log.read("muster.evt.default.job.*")
    assert len({r.subject for r in jobs}) == 1


@pytest.mark.parametrize(
    ("verb", "data", "expected"),
    [
        ("create", b"not json at all", "not UTF-8 JSON"),
        # A leading NUL made json.loads guess UTF-16 and blame the 'utf-16-be' codec.
        ("create", b'\x00{"name": "c", "template": "hadoop-small", "nodes": 3}', "request body is not UTF-8 JSON: Expecting value"),
        ("create", b"\xff\xfe{}", "not UTF-8 JSON: byte 0 (b'\\xff') is not UTF-8"),
        # A config nesting 100,000 arrays answered "internal error" (RecursionError).
        ("create", b'{"name": "c", "template": "hadoop-small", "nodes": 3, "config": {"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
         "request body nests 100,002 levels deep; the limit is 32"),
        # NaN, Infinity and 1e999 (inf) were taken, and the cluster's config stored them as null.
        ("create", b'{"name": "c", "template": "hadoop-small", "nodes": 3, "config": {"a": NaN}}',
         "request body is not valid JSON: NaN is not a JSON number (JSON has no NaN or Infinity)"),
        ("create", b'{"name": "c", "template": "hadoop-small", "nodes": 3, "config": {"a": -Infinity}}', "-Infinity is not a JSON number"),
        ("create", b'{"name": "c", "template": "hadoop-small", "nodes": 3, "config": {"a": 1e999}}', "1e999 is too large a number"),
        # An integer of 5,000 digits answered "internal error" (int()'s own ValueError).
        ("create", b'{"name": "c", "template": "hadoop-small", "nodes": 3, "config": {"a": ' + b"7" * 5000 + b"}}",
         "a number of 5,000 digits; at most 4,300"),
        ("create", b"[1, 2]", "JSON object"),
        ("create", body({"name": "c", "template": "hadoop-small", "nodes": "five"}), "nodes"),
        ("create", body({"name": "c", "template": "hadoop-small", "nodes": 3, "extra": 1}), "extra"),
        ("create", body({"name": "c", "template": "no-such-template", "nodes": 3}), "no-such-template"),
        ("create", body({"name": "c", "template": "hadoop-small", "nodes": 51}), "allows 2 to 50 nodes (its size constraint); 51 requested"),
        ("create", body({"type": "DeleteCluster", "cluster_id": "x"}), "takes a CreateCluster"),
        ("delete", body({"cluster_id": "no-such-cluster"}), "no cluster no-such-cluster in tenant default"),
        ("explode", b"{}", "unknown operation"),
    ],
)
async def test_bad_input_is_rejected_by_name_and_nothing_reaches_the_log(h: Harness, verb: str, data: bytes, expected: str) -> None:
    before = len(h.log.records)
    reply = await h.send_raw(verb, data)
    assert isinstance(reply, Rejected) and expected in reply.reason, reply
    assert len(h.log.records) == before
    # ...and the planner still answers.
    assert isinstance(await h.send_raw("create", b"{"), Rejected)


async def test_a_jobs_moves_say_where_each_service_was_before_it(h: Harness) -> None:
    """`ServicesMoved` (v2) has each change's state before the job: a reader of the log sees a
    stop's `running -> stopped`, not only `stopped` (session 36)."""
    cid = await h.cluster_of(2)
    stop = await h.ok(StopServices(cluster_id=cid, services=["hdfs-datanode"]))
    [moved] = [r.event for r in h.log.records if r.type == "ServicesMoved" and r.event.job_id == stop.job_id]
    assert moved.v == 2 and ("hdfs-datanode", "running", "stopped") in {(c.service, c.before, c.state) for c in moved.changes}
    assert {c.before for c in moved.changes} == {"running"}
