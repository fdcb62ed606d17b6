"""Admission of every verb: each is accepted when its rules hold and refused, by name and with
nothing recorded, when one does not. Also the hooks: an admission check, the ownership
predicate, and the principal that becomes the events' `by`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from planner_harness import CHECKED, SIMPLE, Harness, OwnedWhere, demo_catalog, unsolvable

from contracts.commands import (
    Accepted,
    AddServices,
    ApplyPlan,
    ApproveJob,
    CancelJob,
    CheckCluster,
    ConfigureCluster,
    CreateCluster,
    DeleteCluster,
    DryRun,
    ExpandCluster,
    ExtendLease,
    PauseJob,
    Rejected,
    RejectJob,
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
from contracts.events import FINAL_JOB_STATES, JobRequested
from services.planner.domain.admission import Refused
from services.planner.domain.job import Job, job_uuid
from services.planner.domain.operations import VERBS
from services.planner.domain.saga import control_refusal

HOLD_ALL = "hold"


def harness() -> Harness:
    catalog = demo_catalog(extra=SIMPLE, checked=CHECKED)
    catalog.clustertemplates["hadoop-small"].defaults.services.append("checked")
    return Harness(catalog=catalog)


async def _running_job(h: Harness) -> str:
    """A create whose tasks the workers hold: the job stays running."""
    h.behaviour = lambda m: "hold"
    reply = await h.send(CreateCluster(name="running", template="hadoop-small", nodes=2))
    assert isinstance(reply, Accepted)
    await h.settle()
    return reply.job_id


async def _failed_job(h: Harness, cid: str) -> str:
    """An add-services whose install always fails: rolled back, so retry may run it again."""
    h.behaviour = lambda m: "fail" if m.service is not None and m.service.name == "extra" and m.action.value == "install" else "succeed"
    reply = await h.send(AddServices(cluster_id=cid, services=["extra"]))
    assert isinstance(reply, Accepted)
    await h.settle()
    assert h.job(reply.job_id).state == "rolled_back"
    h.behaviour = lambda m: "succeed"
    return reply.job_id


# Each verb: a command built from a live cluster, accepted and run to its end.
Accept = Callable[[Harness, str], Awaitable[Any]]


async def _expand_then(h: Harness, cid: str) -> Any:
    expand = await h.ok(ExpandCluster(cluster_id=cid, nodes=3))
    return RollbackCluster(cluster_id=cid, to_job=expand.job_id)


async def _saved_plan(h: Harness, cid: str) -> Any:
    shown = await h.send(ConfigureCluster(cluster_id=cid, config={"k": 2}, dry_run=True))
    assert isinstance(shown, DryRun) and shown.plan_id is not None
    return ApplyPlan(plan_id=shown.plan_id)


ACCEPTED: dict[str, Accept] = {
    "create": lambda h, cid: _value(CreateCluster(name="another", template="hadoop-small", nodes=2)),
    "delete": lambda h, cid: _value(DeleteCluster(cluster_id=cid)),
    "expand": lambda h, cid: _value(ExpandCluster(cluster_id=cid, nodes=3)),
    "shrink": lambda h, cid: _value(ShrinkCluster(cluster_id=cid, nodes=2)),
    "add-services": lambda h, cid: _value(AddServices(cluster_id=cid, services=["extra"])),
    "remove-services": lambda h, cid: _value(RemoveServices(cluster_id=cid, services=["yarn-nodemanager"])),
    "configure": lambda h, cid: _value(ConfigureCluster(cluster_id=cid, config={"k": 1})),
    "start": lambda h, cid: _value(StartServices(cluster_id=cid, services=["hdfs-datanode"])),
    "stop": lambda h, cid: _value(StopServices(cluster_id=cid)),
    "restart": lambda h, cid: _value(RestartServices(cluster_id=cid, services=["zookeeper-server"])),
    "upgrade": lambda h, cid: _value(UpgradeService(cluster_id=cid, service="base")),
    "rollback": _expand_then,
    "apply": _saved_plan,
    "check": lambda h, cid: _value(CheckCluster(cluster_id=cid)),  # `checked` defines status
}


async def _value(command: Any) -> Any:
    return command


@pytest.mark.parametrize("verb", sorted(ACCEPTED))
async def test_each_operation_is_accepted_and_runs_to_success(verb: str) -> None:
    h = harness()
    cid = await h.cluster_of(3 if verb == "shrink" else 2)
    command = await ACCEPTED[verb](h, cid)
    reply = await h.send(command)
    assert isinstance(reply, Accepted) and not reply.duplicate, reply
    await h.settle()
    job = h.job(reply.job_id)
    assert job.state == "succeeded" and job.operation == ("configure" if verb == "apply" else verb)
    assert h.cluster(reply.cluster_id).status == ("deleted" if verb == "delete" else "active")
    assert h.cluster(reply.cluster_id).job_id == reply.job_id


async def test_job_control_verbs_are_accepted_in_the_states_that_allow_them() -> None:
    h = harness()
    job_id = await _running_job(h)
    for command in (PauseJob(job_id=job_id), ResumeJob(job_id=job_id), CancelJob(job_id=job_id)):
        assert isinstance(await h.send(command), Accepted), command
    h.behaviour = lambda m: "succeed"
    await h.release()
    assert h.job(job_id).state == "rolled_back"
    cid = await h.cluster_of(2, name="other")
    failed = await _failed_job(h, cid)
    assert isinstance(await h.send(RetryJob(job_id=failed)), Accepted)
    await h.settle()
    assert h.history(failed).count("JobRetried") == 1


# Each verb: a request its rules refuse, and the reason it gets.
Refuse = Callable[[Harness], Awaitable[tuple[Any, str]]]


async def _active(h: Harness) -> str:
    return await h.cluster_of(2)


async def _unsolvable(h: Harness) -> str:
    """A cluster whose create found no layout: its status is `failed`."""
    reply = await h.send(unsolvable(h))
    assert isinstance(reply, Accepted)
    await h.settle()
    assert h.job(reply.job_id).state == "failed" and "no layout" in h.job(reply.job_id).error
    return reply.cluster_id


async def _bare(h: Harness) -> str:
    """An active cluster of `base` alone."""
    return (await h.ok(CreateCluster(name="bare", template="hadoop-small", nodes=2, services=["base"]))).cluster_id


async def _deleted(h: Harness) -> str:
    cid = await _active(h)
    await h.ok(DeleteCluster(cluster_id=cid))
    return cid


async def _create_job_of(h: Harness) -> tuple[str, str]:
    cid = await _active(h)
    return cid, h.cluster(cid).job_id


REFUSED: dict[str, list[Refuse]] = {
    "create": [
        lambda h: _pair(CreateCluster(name="x", template="hadoop-small", nodes=2, provider="nope"), "unknown provider 'nope'"),
        lambda h: _pair(CreateCluster(name="x", template="hadoop-small", nodes=2, services=["base", "ghost"]), "unknown services: ghost"),
        lambda h: _pair(CreateCluster(name="x", template="hadoop-small", nodes=1), "allows 2 to 50 nodes (its size constraint); 1 requested"),
        # Accepted, a cluster made, and its job failed `no layout: ...` a moment later (a dry run refused it at once).
        lambda h: _pair(CreateCluster(name="x", template="hadoop-small", nodes=3, services=["base", "yarn-nodemanager"]),
                        "yarn-nodemanager requires yarn-resourcemanager, which no service on the cluster is or provides"),
    ],
    "delete": [lambda h: _with(_deleted(h), lambda cid: (DeleteCluster(cluster_id=cid), "is deleted"))],
    "expand": [lambda h: _with(_active(h), lambda cid: (ExpandCluster(cluster_id=cid, nodes=2), "expand needs more than"))],
    "shrink": [lambda h: _with(_active(h), lambda cid: (ShrinkCluster(cluster_id=cid, nodes=3), "shrink needs fewer than"))],
    "add-services": [
        lambda h: _with(_active(h), lambda cid: (AddServices(cluster_id=cid, services=["ghost"]), "unknown services: ghost")),
        lambda h: _with(_active(h), lambda cid: (AddServices(cluster_id=cid, services=["base"]), "already on the cluster: base")),
        lambda h: _with(_bare(h), lambda cid: (AddServices(cluster_id=cid, services=["hdfs-datanode"]),
                                               "hdfs-datanode requires hdfs-namenode, which no service on the cluster is or provides")),
    ],
    "remove-services": [
        lambda h: _with(_active(h), lambda cid: (RemoveServices(cluster_id=cid, services=["extra"]), "not on the cluster: extra")),
        # Accepted, and the job failed a moment later with the solver's `no layout` (a dry run refused it at once).
        lambda h: _with(_active(h), lambda cid: (RemoveServices(cluster_id=cid, services=["hdfs-namenode", "zookeeper-server"]),
                                                 "cannot remove hdfs-namenode: hdfs-datanode, yarn-resourcemanager require it")),
        # (zookeeper-server goes with the only service that requires it: not named)
    ],
    "configure": [lambda h: _with(_unsolvable(h), lambda cid: (ConfigureCluster(cluster_id=cid, config={}), "is failed; configure needs an active cluster"))],
    "start": [lambda h: _with(_active(h), lambda cid: (StartServices(cluster_id=cid, services=["extra"]), "has no service 'extra' (not on this cluster)"))],
    "stop": [lambda h: _with(_deleted(h), lambda cid: (StopServices(cluster_id=cid), "is deleted"))],
    "restart": [lambda h: _with(_unsolvable(h), lambda cid: (RestartServices(cluster_id=cid), "restart needs an active cluster"))],
    "upgrade": [lambda h: _with(_active(h), lambda cid: (UpgradeService(cluster_id=cid, service="ghost"), "has no service 'ghost' (not in the catalog)"))],
    "rollback": [
        lambda h: _with(_active(h), lambda cid: (RollbackCluster(cluster_id=cid, to_job="no-such"), "unknown job 'no-such'")),
        lambda h: _with(_create_job_of(h), lambda c: (RollbackCluster(cluster_id=c[0], to_job=c[1]), "left no earlier state")),
    ],
    "apply": [lambda h: _pair(ApplyPlan(plan_id="nope"), "unknown plan 'nope'")],
    "check": [lambda h: _with(_deleted(h), lambda cid: (CheckCluster(cluster_id=cid), "is deleted"))],
    "repair": [lambda h: _with(_active(h), lambda cid: (RepairCluster(cluster_id=cid), "has no drift to repair"))],
    "extend-lease": [  # and test_leases.py: the lease's own limits
        lambda h: _with(_deleted(h), lambda cid: (ExtendLease(cluster_id=cid, by_s=60), "is deleted")),
        lambda h: _pair(ExtendLease(cluster_id="nope", by_s=60), "no cluster nope in tenant default"),
    ],
    "pause": [lambda h: _with(_create_job_of(h), lambda c: (PauseJob(job_id=c[1]), "has succeeded (it ended): nothing to pause"))],
    "resume": [lambda h: _with(_running_job(h), lambda j: (ResumeJob(job_id=j), "is running, not paused: nothing to resume"))],
    "cancel": [lambda h: _with(_create_job_of(h), lambda c: (CancelJob(job_id=c[1]), "has succeeded (it ended): nothing to cancel"))],
    "retry": [lambda h: _with(_running_job(h), lambda j: (RetryJob(job_id=j), "is running: cannot retry it"))],
    "approve": [lambda h: _with(_running_job(h), lambda j: (ApproveJob(job_id=j), "not waiting for approval"))],
    "reject": [lambda h: _with(_running_job(h), lambda j: (RejectJob(job_id=j), "not waiting for approval"))],
}


async def _pair(command: Any, reason: str) -> tuple[Any, str]:
    return command, reason


async def _with(setup: Awaitable[Any], make: Callable[[Any], tuple[Any, str]]) -> tuple[Any, str]:
    return make(await setup)


def test_every_verb_has_admission_cases() -> None:
    assert set(REFUSED) == set(VERBS)
    # repair: test_observed.py; approve, reject: test_governance.py
    assert set(ACCEPTED) | {"pause", "resume", "cancel", "retry", "extend-lease", "repair", "approve", "reject"} == set(VERBS)


@pytest.mark.parametrize(("verb", "case"), [(v, i) for v, cases in sorted(REFUSED.items()) for i in range(len(cases))])
async def test_each_verb_refuses_by_name_and_records_nothing(verb: str, case: int) -> None:
    h = harness()
    command, reason = await REFUSED[verb][case](h)
    before = len(h.log.records)
    reply = await h.send(command)
    assert isinstance(reply, Rejected) and reason in reply.reason, (verb, reply)
    assert len(h.log.records) == before


async def test_a_second_operation_on_a_busy_cluster_is_refused_for_every_cluster_verb() -> None:
    h = harness()
    cid = await _active(h)
    h.behaviour = lambda m: "hold"
    first = await h.send(ConfigureCluster(cluster_id=cid, config={"a": 1}))
    assert isinstance(first, Accepted)
    for command in (DeleteCluster(cluster_id=cid), ExpandCluster(cluster_id=cid, nodes=3), StopServices(cluster_id=cid),
                    UpgradeService(cluster_id=cid, service="base")):
        reply = await h.send(command)
        assert isinstance(reply, Rejected) and f"busy with job {first.job_id} (configure, running)" in reply.reason
        # named as people named it, its id beside (a schedule's refused tick said only the id: walk of session 26)
        name = h.cluster(cid).name
        assert reply.reason.startswith(f"cluster {name} ({cid}) is busy"), reply.reason


async def test_a_dry_run_of_a_rule_breaking_request_is_refused_too(h: Harness) -> None:
    cid = await _active(h)
    reply = await h.send(ExpandCluster(cluster_id=cid, nodes=1, dry_run=True))
    assert isinstance(reply, Rejected) and "expand needs more than" in reply.reason


async def test_a_size_past_the_clusters_the_other_way_names_the_verb_that_goes_there(h: Harness) -> None:
    """Walk of session 27: an expand of a 3-node cluster to 2 said only that it needs more than 3."""
    cid = await h.cluster_of(3)
    name = h.cluster(cid).name
    smaller = await h.send(ExpandCluster(cluster_id=cid, nodes=2))
    assert isinstance(smaller, Rejected) and smaller.reason == (
        f"expand needs more than the cluster's 3 nodes; 2 requested: to make it smaller, `muster cluster shrink {name} "
        "--nodes 2`"), smaller
    larger = await h.send(ShrinkCluster(cluster_id=cid, nodes=5))
    assert isinstance(larger, Rejected) and larger.reason.endswith(f"to make it larger, `muster cluster expand {name} --nodes 5`")
    same = await h.send(ExpandCluster(cluster_id=cid, nodes=3))  # already that size: nothing to point to
    assert isinstance(same, Rejected) and same.reason == "expand needs more than the cluster's 3 nodes; 3 requested", same
    # a size the template's range would refuse too (hadoop-small: 2 to 50): no pointer to a second refusal
    below = await h.send(ExpandCluster(cluster_id=cid, nodes=1))
    assert isinstance(below, Rejected) and below.reason == "expand needs more than the cluster's 3 nodes; 1 requested", below


async def test_an_admission_hook_refuses_before_the_rules_and_sees_the_principal() -> None:
    seen: list[tuple[str | None, str]] = []

    def only_admins_delete(ctx: Any, op: Any, command: Any) -> None:
        seen.append((ctx.principal, op.name))
        if op.name == "delete" and ctx.principal != "admin":
            raise Refused(f"{ctx.principal} may not delete clusters")

    h = Harness(admission=(only_admins_delete,))
    cid = await h.cluster_of(2)
    reply = await h.send(DeleteCluster(cluster_id=cid), principal="alice")
    assert isinstance(reply, Rejected) and reply.reason == "alice may not delete clusters"
    deleted = await h.send(DeleteCluster(cluster_id=cid), principal="admin")
    assert isinstance(deleted, Accepted)
    assert seen[-2:] == [("alice", "delete"), ("admin", "delete")]


async def test_the_principal_becomes_the_events_by(h: Harness) -> None:
    reply = await h.send(CreateCluster(name="who", template="hadoop-small", nodes=2, requested_by="claimed"), principal="alice")
    assert isinstance(reply, Accepted)
    h.behaviour = lambda m: "hold"
    await h.settle()
    assert isinstance(await h.send(PauseJob(job_id=reply.job_id, requested_by="claimed"), principal="bob"), Accepted)
    assert h.events(reply.job_id, "JobRequested")[0].requested_by == "alice"
    assert h.events(reply.job_id, "JobPaused")[0].by == "bob"
    # Without a principal (no identities yet) the body's `requested_by` is what is recorded.
    other = await h.send(CreateCluster(name="who2", template="hadoop-small", nodes=2, requested_by="claimed"))
    assert isinstance(other, Accepted) and h.events(other.job_id, "JobRequested")[0].requested_by == "claimed"


async def test_requests_for_clusters_another_planner_owns_are_refused_and_their_events_skipped() -> None:
    elsewhere: set[str] = set()
    h = Harness(ownership=OwnedWhere(lambda tenant, cluster_id: cluster_id not in elsewhere))
    cid = await h.cluster_of(2)
    elsewhere.add(cid)  # its shard's lease is another planner's
    reply = await h.send(ConfigureCluster(cluster_id=cid, config={"x": 1}))
    # Refused as "send it again" (the shard moved while it waited): the client asks the owner.
    assert isinstance(reply, Rejected) and "moved to another planner" in reply.reason and reply.retry
    elsewhere.clear()
    h.behaviour = lambda m: "hold"
    accepted = await h.send(ConfigureCluster(cluster_id=cid, config={"x": 1}))
    assert isinstance(accepted, Accepted)
    elsewhere.add(cid)  # the lease moved on
    h.behaviour = lambda m: "succeed"
    await h.release()
    assert h.job(accepted.job_id).state == "running"  # outcomes for a cluster it no longer owns are not its to take


async def test_a_callback_subject_of_another_tenant_is_refused_before_anything_is_written() -> None:
    from contracts.commands import PoolWait
    from contracts.pools import Callback

    h = harness()
    before = len(h.log.records)
    for tenant in ("other", "defaults", "default-"):
        wait = PoolWait(callback=Callback(subject=f"muster.cb.{tenant}.hosts"))
        reply = await h.send(CreateCluster(name="cb", template="hadoop-small", nodes=2, pool=wait))
        assert isinstance(reply, Rejected) and reply.field == "pool.callback" and reply.code == "invalid", reply
        assert reply.reason == "--callback: its subject must be one of the tenant's, muster.cb.default.…", reply
    assert len(h.log.records) == before
    own = PoolWait(callback=Callback(subject="muster.cb.default.hosts"))  # its own: on to the next rule
    reply = await h.send(CreateCluster(name="cb", template="hadoop-small", nodes=2, pool=own))
    assert isinstance(reply, Rejected) and "takes no hosts from a pool" in reply.reason, reply


async def test_a_callback_on_a_cluster_without_a_pool_is_refused_not_ignored() -> None:
    from contracts.commands import PoolWait
    from contracts.pools import Callback

    h = harness()
    before = len(h.log.records)
    wait = PoolWait(callback=Callback(url="https://hooks.example/done"))
    reply = await h.send(CreateCluster(name="cb", template="hadoop-small", nodes=2, pool=wait))
    assert isinstance(reply, Rejected) and reply.field == "pool.callback" and "takes no hosts from a pool" in reply.reason
    assert len(h.log.records) == before
    cid = await _active(h)
    reply = await h.send(ExpandCluster(cluster_id=cid, nodes=3, pool=wait))
    assert isinstance(reply, Rejected) and "muster notify add" in reply.reason


async def test_a_create_in_a_tenant_without_templates_names_the_tenant_not_the_template() -> None:
    # `--tenant acmee` (a typo) read as "unknown cluster template 'hadoop-small'", which sent
    # the user looking at the catalog; a tenant with no templates at all is named instead.
    h = harness()
    before = len(h.log.records)
    reply = await h.send(CreateCluster(name="c1", template="hadoop-small", nodes=2), tenant="acmee")
    assert isinstance(reply, Rejected) and reply.field == "template"
    assert reply.reason.startswith("tenant 'acmee' has no cluster templates: is it the tenant you meant (`muster tenant list`)?")
    assert len(h.log.records) == before
    reply = await h.send(CreateCluster(name="c1", template="nope", nodes=2))  # a tenant with a catalog: the template
    assert isinstance(reply, Rejected) and reply.reason == "unknown cluster template 'nope'"


def test_a_control_of_an_ended_job_says_it_ended_in_plain_words_for_every_final_state() -> None:
    job = Job(JobRequested(tenant="acme", job_id=str(job_uuid("acme", "r")), cluster_id="c", operation="create",
                           request={}, max_attempts=3))
    said = {}
    for state in sorted(FINAL_JOB_STATES):
        job.state = state  # the words only: how the job got there does not matter
        said[state] = control_refusal(job, "cancel")
    assert said == {
        "failed": f"job {job.id} has failed (it ended): nothing to cancel",
        "needs_attention": f"job {job.id} ended needing attention: nothing to cancel",
        "rolled_back": f"job {job.id} was rolled back (it ended): nothing to cancel",
        "succeeded": f"job {job.id} has succeeded (it ended): nothing to cancel",
    }
    assert "cannot" not in control_refusal(job, "pause") and " is " not in control_refusal(job, "resume")


async def test_an_operation_on_a_cluster_only_a_retry_or_a_delete_can_mend_says_which() -> None:
    """`cluster up1 is needs_attention; restart needs an active cluster` named no way out: the
    refusal names the job whose rollback failed, its reason, the retry and the delete."""
    h = Harness()
    h.behaviour = lambda m: "fail" if m.action.value in ("start", "delete") else "succeed"
    reply = await h.send(CreateCluster(name="stuck", template="hadoop-small", nodes=2))
    assert isinstance(reply, Accepted)
    await h.settle()
    assert h.cluster(reply.cluster_id).status == "needs_attention"
    refused = await h.send(RestartServices(cluster_id=reply.cluster_id))
    assert isinstance(refused, Rejected)
    assert f"needs an active cluster: job {reply.job_id} left it so (rollback failed: task undo." in refused.reason
    assert f"`muster job retry {reply.job_id}` runs the rest of its rollback, `muster cluster delete` removes the cluster" \
        in refused.reason
    failed = await _unsolvable(h)
    said = (await h.send(RestartServices(cluster_id=failed))).reason
    assert "needs an active cluster: its create did not finish (no layout: " in said, said
    assert said.endswith("; `muster cluster delete` removes it"), said
