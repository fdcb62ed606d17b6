"""Concurrency limits at dispatch (#17.5): a provider's `maxconcurrent` bounds its own tasks
(create, confirm, delete) in flight across every job of the tenant, `--tenant-limit` bounds a
tenant's tasks; held tasks go out as slots free, after a restart too; the metrics and the dry
run's plan show the limits."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from planner_harness import Harness, demo_catalog

from contracts.commands import Accepted, CreateCluster, DryRun
from contracts.tasks import TaskMessage
from services.planner.app import PlannerConfig
from services.planner.domain.limits import PROVIDER_ACTIONS


def limited(maxconcurrent: int | None = None, **config: Any) -> Harness:
    catalog = demo_catalog()
    if maxconcurrent is not None:
        catalog.providers["sim"] = catalog.providers["sim"].model_copy(update={"maxconcurrent": maxconcurrent})
    return Harness(catalog=catalog, config=PlannerConfig(instance="planner-test", **config))


async def run_one_at_a_time(h: Harness) -> list[list[TaskMessage]]:
    """Workers hold every task; release them one by one (oldest first). Returns what was in
    flight after each step."""
    h.behaviour = lambda m: "hold"
    seen = []
    await h.settle()
    while h.held:
        seen.append(list(h.held))
        first, h.held = h.held[0], h.held[1:]
        await h.work(first, "succeed")
        await h.settle()
    return seen


def provider_tasks(messages: list[TaskMessage]) -> int:
    return sum(m.action.value in PROVIDER_ACTIONS for m in messages)


async def test_a_provider_limit_holds_its_tasks_across_jobs() -> None:
    h = limited(maxconcurrent=2)
    h.behaviour = lambda m: "hold"
    replies = [await h.send(CreateCluster(name=f"c{i}", template="hadoop-small", nodes=3)) for i in range(2)]
    assert all(isinstance(r, Accepted) for r in replies)
    steps = await run_one_at_a_time(h)
    assert max(provider_tasks(s) for s in steps) == 2  # six creates wanted to go at once
    assert len(steps[0]) == 2 and provider_tasks(steps[0]) == 2
    for reply in replies:
        assert isinstance(reply, Accepted) and h.job(reply.job_id).state == "succeeded"
    # Both jobs got slots (the limit is shared, not first come, all served).
    jobs_in_flight = Counter(m.job_id for s in steps for m in s if m.action.value == "create")
    assert len(jobs_in_flight) == 2


async def test_a_tenant_limit_bounds_every_task_of_the_tenant() -> None:
    h = limited(tenant_limits={"default": 3})
    reply = await h.send(CreateCluster(name="c", template="hadoop-small", nodes=5))
    assert isinstance(reply, Accepted)
    steps = await run_one_at_a_time(h)
    assert max(len(s) for s in steps) == 3
    assert h.job(reply.job_id).state == "succeeded"


async def test_without_limits_nothing_is_held() -> None:
    h = limited()
    await h.send(CreateCluster(name="c", template="hadoop-small", nodes=4))
    steps = await run_one_at_a_time(h)
    assert len(steps[0]) == 4


async def test_the_limit_holds_after_a_restart() -> None:
    h = limited(maxconcurrent=2, task_timeout_s=10_000)
    h.behaviour = lambda m: "hold"
    await h.send(CreateCluster(name="c", template="hadoop-small", nodes=4))
    await h.settle()
    assert len(h.held) == 2
    await h.restart()  # the new planner counts the two in flight before it dispatches anything
    h.queue.take()  # the resume re-publishes the two queued attempts (same ids): drop the copies
    await h.settle()
    assert len(h.held) == 2
    steps = await run_one_at_a_time(h)
    assert max(provider_tasks(s) for s in steps) <= 2


async def test_the_metrics_and_the_plan_show_the_limits() -> None:
    h = limited(maxconcurrent=2, tenant_limit=10)
    h.behaviour = lambda m: "hold"
    await h.send(CreateCluster(name="c", template="hadoop-small", nodes=4))
    await h.settle()
    snapshot = {(e["kind"], e.get("provider")): e for e in h.planner.limits.snapshot()}
    assert snapshot[("provider", "sim")] == {"kind": "provider", "tenant": "default", "provider": "sim", "limit": 2,
                                             "in_flight": 2, "held": 2}
    assert snapshot[("tenant", None)]["in_flight"] == 2 and snapshot[("tenant", None)]["limit"] == 10
    dry = await h.send(CreateCluster(name="d", template="hadoop-small", nodes=4, dry_run=True))
    assert isinstance(dry, DryRun)
    assert dry.plan["limits"] == {"provider": {"name": "sim", "maxconcurrent": 2, "tasks": 8}, "tenant": 10}


async def test_the_tracker_exports_the_limits_the_planners_answer() -> None:
    from services.planner.replies import Replies
    from services.tracker.metrics import PlannerQueues

    h = limited(maxconcurrent=2)
    h.behaviour = lambda m: "hold"
    await h.send(CreateCluster(name="c", template="hadoop-small", nodes=3))
    await h.settle()
    queues = PlannerQueues(nc=None)  # type: ignore[arg-type]  # collect() only reads answers
    queues.answers = [json.loads(await Replies(h.planner).metrics("muster.metrics.planner", b"") or b"{}")]
    samples = {(s.name, s.labels["kind"]): s.value for family in queues.collect() for s in family.samples
               if s.name.startswith("muster_planner_limit")}
    assert samples == {("muster_planner_limit", "provider"): 2.0, ("muster_planner_limit_in_flight", "provider"): 2.0,
                       ("muster_planner_limit_held", "provider"): 1.0}


async def test_a_job_no_limit_applies_to_is_not_tracked_and_one_set_later_counts_what_it_has_queued() -> None:
    h = limited()
    h.behaviour = lambda m: "hold"
    reply = await h.send(CreateCluster(name="c", template="hadoop-small", nodes=4))
    assert isinstance(reply, Accepted)
    await h.settle()
    limits, job = h.planner.limits, h.job(reply.job_id)
    cluster = h.cluster(job.cluster_id)
    assert limits.in_flight == {} and limits.count == Counter()  # nothing walked, nothing kept
    limits.tenant_limits = {"default": 2}  # a limit from now on: the job's queued tasks count at once
    waiting = next(t for t in job.tasks if t not in job.task_state)
    assert limits.admit(job, cluster, [waiting]) == []  # over the limit already
    queued = sum(1 for s in job.task_state.values() if s == "queued")
    # (the 4 creates; with segments their nodes' followers too, queued with them: they count from then)
    assert queued == len(h.sent()) >= 4 and limits.count[(("tenant", "default"), 0)] == queued


async def test_a_create_with_no_other_layout_left_gives_its_slots_back() -> None:
    """A create whose every layout failed (`--relayout`, and the solver had no other) ended
    `rolled_back` still counting its rollback's last delete against the provider's and the
    tenant's limits, for good: each limit one slot short until the planner restarted (a
    provider of `maxconcurrent: 2` ran its creates one at a time)."""
    h = limited(maxconcurrent=2, tenant_limit=3)
    h.behaviour = lambda m: "fail" if m.action.value == "create" else "succeed"
    only = CreateCluster(name="r", template="hadoop-small", nodes=2, services=["base"], hardwaretype="medium",
                         imagetype="ubuntu22", relayout=2)
    reply = await h.send(only)
    await h.settle()
    assert isinstance(reply, Accepted) and h.job(reply.job_id).state == "rolled_back"
    assert "with no other to try" in h.job(reply.job_id).error
    after = await h.send(CreateCluster(name="next", template="hadoop-small", nodes=3))
    assert isinstance(after, Accepted)
    steps = await run_one_at_a_time(h)
    assert provider_tasks(steps[0]) == 2, [m.task_id for m in steps[0]]
    assert h.job(after.job_id).state == "succeeded"
    assert not +h.planner.limits.count and not h.planner.limits.in_flight
