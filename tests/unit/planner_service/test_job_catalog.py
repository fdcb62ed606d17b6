"""A job keeps the catalog it was admitted with: a catalog applied while it runs changes none of
its tasks, whatever request or restart makes the planner read the catalog again; a retry takes
the catalog of its time (a fixed script), and an upgrade admitted after the apply installs the
new definition. The catalog is read from the log, as `muster catalog apply` writes it."""

from __future__ import annotations

from contracts.catalog import Action, Catalog
from contracts.commands import Accepted, CreateCluster, ExpandCluster, RetryJob, UpgradeService
from contracts.events import JobRolledBack, JobSucceeded
from contracts.tasks import TaskMessage
from muster.catalog.store import append_changes, check_apply, read_state
from services.planner.state import LogCatalogs

from .planner_harness import Behaviour, Harness, demo_catalog


def scripted(script: str) -> Catalog:
    """The demo catalog whose hdfs-datanode starts with `script`."""
    catalog = demo_catalog()
    start = catalog.services["hdfs-datanode"].provisioner.actions[Action.START]
    start.fields["script"] = script
    return catalog


async def apply(h: Harness, catalog: Catalog) -> None:
    state = await read_state(h.log, "default")
    check = check_apply(state, catalog, None)
    assert check.ok, check.errors
    await append_changes(h.log, "default", check.changes, state.last_seq, "ada")


def starts(h: Harness, job_id: str) -> set[str]:
    return {m.service.action.fields["script"] for m in h.queue.messages
            if m.job_id == job_id and m.action is Action.START and m.service is not None and m.service.name == "hdfs-datanode"}


async def from_the_log() -> Harness:
    h = Harness()
    h.catalogs = LogCatalogs(h.log)  # type: ignore[assignment]
    h.planner = h._planner()
    await apply(h, scripted("start v1"))
    return h


def hold_starts(m: TaskMessage) -> Behaviour:
    return "hold" if m.action is Action.START else "succeed"


async def test_a_catalog_applied_while_a_job_runs_changes_none_of_its_tasks() -> None:
    h = await from_the_log()
    h.behaviour = hold_starts
    reply = await h.send(CreateCluster(name="c1", template="hadoop-small", nodes=4))
    assert isinstance(reply, Accepted)
    await h.settle()
    assert h.held and not starts(h, reply.job_id)  # the job reached its starts and waits there
    await apply(h, scripted("start v2"))
    # Another request makes the planner read the catalog again (before, the job then took it up).
    await h.send(CreateCluster(name="other", template="hadoop-small", nodes=2, dry_run=True))
    await h.restart()  # and so does a planner that takes the job over
    h.behaviour = lambda m: "succeed"
    await h.release()
    assert isinstance(h.final(reply.job_id), JobSucceeded)
    assert starts(h, reply.job_id) == {"start v1"}
    assert h.job(reply.job_id).catalog_seq is not None
    upgrade = await h.ok(UpgradeService(cluster_id=reply.cluster_id, service="hdfs-datanode"))  # admitted after: the new one
    assert starts(h, upgrade.job_id) == {"start v2"}


async def test_a_retried_job_runs_with_the_catalog_of_the_retry() -> None:
    h = await from_the_log()
    cluster_id = (await h.ok(CreateCluster(name="c1", template="hadoop-small", nodes=3))).cluster_id
    h.behaviour = lambda m: "fail" if m.action is Action.START and m.service and m.service.name == "hdfs-datanode" else "succeed"
    expand = await h.send(ExpandCluster(cluster_id=cluster_id, nodes=4))
    assert isinstance(expand, Accepted)
    await h.settle()
    assert isinstance(h.final(expand.job_id), JobRolledBack) and starts(h, expand.job_id) == {"start v1"}
    await apply(h, scripted("start fixed"))
    h.behaviour = lambda m: "succeed"
    before = len(h.queue.messages)
    await h.send(RetryJob(job_id=expand.job_id))
    await h.settle()
    assert isinstance(h.final(expand.job_id), JobSucceeded)
    retried = {m.service.action.fields["script"] for m in h.queue.messages[before:]
               if m.job_id == expand.job_id and m.action is Action.START and m.service and m.service.name == "hdfs-datanode"}
    assert retried == {"start fixed"}
