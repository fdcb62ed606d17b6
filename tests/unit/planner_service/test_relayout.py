"""Another layout after a failure: a create or expand whose task ran out of attempts is rolled
back and, when its request (or template) allows it, asks the solver for a layout other than every
one tried (`JobLayoutRetried`, `LayoutRequested.exclude`); a request without it, a cancel, or no
layout left ends the job rolled back as before (docs/planner.md, "Another layout")."""

from __future__ import annotations

from typing import Any

from planner_harness import Harness, demo_catalog, fails_creates

from contracts import subjects
from contracts.commands import Accepted, CancelJob, CreateCluster, ExpandCluster, Rejected
from contracts.events import JobRolledBack, JobSucceeded
from muster.readmodel.jobs import job_view
from services.solver.domain.outcome import canonical


def layouts(h: Harness, job_id: str) -> list[Any]:
    return [r.event for r in h.log.records if r.subject == subjects.layout_events("default", job_id)]


async def test_a_create_that_fails_past_its_retries_gets_another_layout_and_succeeds(h: Harness) -> None:
    h.behaviour = fails_creates(3)  # one node's create, all three attempts
    reply = await h.send(CreateCluster(name="r", template="hadoop-small", nodes=3, relayout=1))
    assert isinstance(reply, Accepted)
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobSucceeded)
    history = h.history(reply.job_id)
    assert history.index("RollbackPlanned") < history.index("JobLayoutRetried") < history.index("JobSucceeded")
    asked = [e for e in layouts(h, reply.job_id) if e.type == "LayoutRequested"]
    solved = [e for e in layouts(h, reply.job_id) if e.type == "LayoutSolved"]
    assert [e.round for e in asked] == [0, 1] and [e.round for e in solved] == [0, 1]
    assert [canonical(x) for x in asked[1].exclude] == [canonical(solved[0].layout)]
    assert canonical(solved[1].layout) != canonical(solved[0].layout)
    retried = h.events(reply.job_id, "JobLayoutRetried")[0]
    assert "failed 3 times" in retried.reason
    # Fresh attempts on the new plan, numbered on (each attempt keeps its own id).
    creates = [(m.task_id, m.attempt) for m in h.queue.messages if m.action.value == "create"]
    assert len(creates) == len(set(creates))
    cluster = h.cluster(reply.cluster_id)
    assert cluster.status == "active" and len(cluster.nodes) == 3
    # The read model folds it as the planner does.
    view = job_view(r for r in h.job_records(reply.job_id))
    assert view is not None and view["state"] == "succeeded" and view["counts"] == h.job(reply.job_id).view()["counts"]


async def test_without_relayout_a_failed_create_is_rolled_back_as_before(h: Harness) -> None:
    h.behaviour = fails_creates(3)
    reply = await h.send(CreateCluster(name="r", template="hadoop-small", nodes=3))
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobRolledBack)
    assert "JobLayoutRetried" not in h.history(reply.job_id)


async def test_when_no_other_layout_exists_the_job_ends_rolled_back_saying_so(h: Harness) -> None:
    h.behaviour = fails_creates(3)
    only = CreateCluster(name="r", template="hadoop-small", nodes=2, services=["base"], hardwaretype="medium",
                         imagetype="ubuntu22", relayout=2)
    reply = await h.send(only)
    await h.settle()
    final = h.final(reply.job_id)
    assert isinstance(final, JobRolledBack)
    assert "after 1 layout(s) that failed, with no other to try: the only layout" in final.reason
    assert "excluded" in final.reason
    assert h.cluster(reply.cluster_id).status == "failed"
    assert h.job(reply.job_id).view()["error"] == final.reason


async def test_the_template_sets_the_default_and_the_request_overrides_it() -> None:
    catalog = demo_catalog()
    template = catalog.clustertemplates["hadoop-small"]
    catalog.clustertemplates["hadoop-small"] = template.model_copy(update={"administration": {**template.administration, "relayout": 1}})
    h = Harness(catalog=catalog)
    h.behaviour = fails_creates(3)
    reply = await h.send(CreateCluster(name="t", template="hadoop-small", nodes=3))
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobSucceeded) and "JobLayoutRetried" in h.history(reply.job_id)
    h.behaviour = fails_creates(3)
    refused = await h.send(CreateCluster(name="u", template="hadoop-small", nodes=3, relayout=0))
    await h.settle()
    assert isinstance(refused, Accepted) and isinstance(h.final(refused.job_id), JobRolledBack)


async def test_a_bad_template_value_is_refused_by_name() -> None:
    catalog = demo_catalog()
    template = catalog.clustertemplates["hadoop-small"]
    catalog.clustertemplates["hadoop-small"] = template.model_copy(update={"administration": {"relayout": "lots"}})
    reply = await Harness(catalog=catalog).send(CreateCluster(name="t", template="hadoop-small", nodes=3))
    assert isinstance(reply, Rejected) and "administration.relayout is 'lots'" in reply.reason and reply.field == "template"


async def test_a_cancelled_job_does_not_ask_for_another_layout(h: Harness) -> None:
    h.behaviour = lambda m: "hold"
    reply = await h.send(CreateCluster(name="c", template="hadoop-small", nodes=2, relayout=2))
    await h.settle()
    assert isinstance(await h.send(CancelJob(job_id=reply.job_id)), Accepted)
    h.behaviour = lambda m: "succeed"
    await h.release()
    assert isinstance(h.final(reply.job_id), JobRolledBack) and "JobLayoutRetried" not in h.history(reply.job_id)


async def test_an_expand_gets_another_layout_too(h: Harness) -> None:
    cid = await h.cluster_of(3)
    h.behaviour = fails_creates(3, node="n1003")
    reply = await h.send(ExpandCluster(cluster_id=cid, nodes=5, relayout=1))
    await h.settle()
    asked = [e for e in layouts(h, reply.job_id) if e.type == "LayoutRequested"]
    assert [e.round for e in asked] == [0, 1] and asked[1].exclude and asked[1].existing is not None
    assert asked[1].existing.nodes == 3  # the cluster as it was before the failed expand
    assert isinstance(h.final(reply.job_id), JobSucceeded) and len(h.cluster(cid).nodes) == 5


async def test_a_planner_restarted_while_waiting_for_the_other_layout_asks_once_and_takes_it(h: Harness) -> None:
    h.behaviour = fails_creates(3)
    h.solving = False  # the test answers the solver's requests itself

    async def answer(round_: int) -> None:
        h.solving = True
        await h.deliver(next(r for r in h.log.records if r.type == "LayoutRequested" and r.event.round == round_))
        h.solving = False
        await h.settle()

    reply = await h.send(CreateCluster(name="r", template="hadoop-small", nodes=3, relayout=1))
    await h.settle()
    await answer(0)  # the first layout fails; the job asks for another and waits
    assert h.job(reply.job_id).layout_round == 1 and not h.job(reply.job_id).planned
    await h.restart()
    await h.settle()
    asked = [e for e in layouts(h, reply.job_id) if e.type == "LayoutRequested"]
    assert [e.round for e in asked] == [0, 1]  # asked once, not again by the restarted planner
    await answer(1)
    assert isinstance(h.final(reply.job_id), JobSucceeded)
