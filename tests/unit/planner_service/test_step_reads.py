"""The planner's answer to a provisioner a segment came to again (`muster.q.<tenant>.<provisioner>.steps`,
docs/decisions/0058 item 5), on the harness's fakes: the outcomes the log holds of the segment's
steps, read with the planner's rights, for a provisioner granted the job's queue only, about the
job's current attempts queued as one segment only (so nothing with segments off)."""

from __future__ import annotations

from typing import Any

from planner_harness import Harness, published

from contracts.commands import Accepted, CreateCluster, DeleteCluster
from contracts.events import TaskSucceeded
from contracts.identity import PermissionGranted, PrincipalCreated, Scope, TenantCreated
from contracts.steps import StepAttempt, StepOutcomes, StepOutcomesQuery
from contracts.tasks import TaskMessage
from services.auth.domain.state import IdentityState
from services.planner.app import PlannerConfig
from services.planner.replies import Replies


def _identities() -> IdentityState:
    """Tenant `default`: provisioners `prov-a` (granted its `default` queue) and `prov-b` (only
    another class's), and a user `reader`."""
    state = IdentityState()
    events: list[Any] = [
        TenantCreated(tenant="default", by="root"),
        PrincipalCreated(principal="prov-a", role="service", service="provisioner", by="root"),
        PrincipalCreated(principal="prov-b", role="service", service="provisioner", by="root"),
        PrincipalCreated(principal="reader", role="user", tenant="default", by="root"),
        PermissionGranted(principal="prov-a", permission="execute", scope=Scope(tenant="default", kind="queue", id="default"), by="root"),
        PermissionGranted(principal="prov-b", permission="execute", scope=Scope(tenant="default", kind="queue", id="gpu"), by="root"),
    ]
    for seq, e in enumerate(events, 1):
        state.apply(e, seq)
    return state


async def _mid_segment(segments: bool = True) -> tuple[Harness, TaskMessage]:
    """A 2-node create whose confirms are claimed and never answered (its provisioner lost): the
    creates' outcomes are stored, no later step's. Returns the first segment's message (its head
    the create)."""
    h = Harness(config=PlannerConfig(instance="p1", segments=segments))
    sent = published(h)
    h.behaviour = lambda m: "silent" if m.action.value == "confirm" else "succeed"
    reply = await h.send(CreateCluster(name="seg", template="hadoop-small", nodes=2))
    assert isinstance(reply, Accepted)
    await h.settle()
    return h, next(m for m in sent if m.action.value == "create")


def _query(message: TaskMessage, **attempts: int) -> bytes:
    steps = [message, *message.then]
    return StepOutcomesQuery(job_id=message.job_id, steps=[
        StepAttempt(task_id=s.task_id, attempt=attempts.get(s.action.value, s.attempt)) for s in steps]).model_dump_json().encode()


async def _ask(h: Harness, data: bytes, principal: str = "prov-a", tenant: str = "default") -> StepOutcomes | None:
    answer = await Replies(h.planner, identities=_identities()).step_outcomes(f"muster.q.{tenant}.{principal}.steps", data)
    return None if answer is None else StepOutcomes.model_validate_json(answer)


async def test_a_granted_provisioner_hears_the_outcomes_stored_up_to_the_first_step_without_one() -> None:
    h, head = await _mid_segment()
    assert [s.action.value for s in head.then][:1] == ["confirm"]
    answer = await _ask(h, _query(head))
    assert answer is not None and not answer.refused and not answer.stale
    [created] = answer.outcomes
    assert isinstance(created, TaskSucceeded) and created.task_id == head.task_id and created.attempt == head.attempt
    assert created.result["providerid"].startswith("sim-") and created.stdout == ""


async def test_a_provisioner_not_granted_the_jobs_queue_and_a_person_are_refused() -> None:
    h, head = await _mid_segment()
    other = await _ask(h, _query(head), principal="prov-b")
    assert other is not None and other.outcomes == [] and "not granted queue:default" in other.refused
    person = await _ask(h, _query(head), principal="reader")
    assert person is not None and person.outcomes == [] and "not a provisioner" in person.refused


async def test_steps_that_are_not_the_jobs_current_segment_are_stale_and_nothing_is_read() -> None:
    h, head = await _mid_segment()
    swapped = StepOutcomesQuery(job_id=head.job_id, steps=[StepAttempt(task_id=head.then[1].task_id, attempt=1),
                                                            StepAttempt(task_id=head.task_id, attempt=1)])
    reordered = await _ask(h, swapped.model_dump_json().encode())
    assert reordered is not None and reordered.outcomes == [] and "was not queued after" in reordered.stale
    h.behaviour = lambda m: "succeed"
    await h.clock.advance(h.config.task_timeout_s + 1)  # the confirms time out: each node made again
    await h.settle()
    assert h.job(head.job_id).attempts[head.task_id] == head.attempt + 1
    older = await _ask(h, _query(head))
    assert older is not None and older.outcomes == [] and "is not its latest" in older.stale
    assert await _ask(h, _query(head, create=head.attempt + 2)) is None  # (newer than it knows: not its to say)


async def test_a_segment_whose_follower_the_planner_ended_unrun_is_stale() -> None:
    """The confirms time out, their followers end unrun (decision 58), and the nodes' cleanups
    have not run yet (the creates not queued again): a copy of the first segment delivered again
    must not take it up after its finished create, claiming the confirm's followers late."""
    h, head = await _mid_segment()
    h.behaviour = lambda m: "silent" if m.action.value in ("confirm", "delete") else "succeed"
    await h.clock.advance(h.config.task_timeout_s + 1)
    await h.settle()
    job = h.job(head.job_id)
    assert job.attempts[head.task_id] == head.attempt and job.task_state[head.then[1].task_id] == "cancelled"
    answer = await _ask(h, _query(head))
    assert answer is not None and answer.outcomes == [] and "was ended unrun" in answer.stale


async def test_with_segments_off_no_step_is_a_segments_and_nothing_is_read() -> None:
    h, create = await _mid_segment(segments=False)
    assert not create.then
    answer = await _ask(h, _query(create))
    assert answer is not None and answer.outcomes == [] and "not queued as a step of a segment" in answer.stale


async def test_only_the_planner_acting_for_the_job_answers_and_a_bad_query_is_refused() -> None:
    h, head = await _mid_segment()
    assert await _ask(h, _query(head), tenant="other") is None  # (no such job of that tenant here)
    bad = await _ask(h, b'{"type": "StepOutcomesQuery", "job_id": "j", "steps": []}')
    assert bad is not None and bad.refused.startswith("not a steps query")


async def test_an_earlier_job_of_a_cluster_it_acts_for_is_stale_though_not_loaded_after_a_restart() -> None:
    """A restarted planner loads each cluster's current job only: a segment of an earlier job
    delivered again (its delivery waited out an ack wait longer than its step's timeout) would
    hear silence at every delivery, and come back for ever. One job of a cluster runs at a
    time, so an earlier one has ended: its steps are stale."""
    h, head = await _mid_segment()
    h.behaviour = lambda m: "succeed"
    await h.clock.advance(h.config.task_timeout_s + 1)  # the confirms time out, and the job ends
    await h.settle()
    cluster_id = h.job(head.job_id).cluster_id
    assert h.final(head.job_id) is not None
    later = await h.ok(DeleteCluster(cluster_id=cluster_id))
    await h.settle()
    await h.restart()
    assert head.job_id not in h.planner.jobs and h.planner.clusters[cluster_id].job_id == later.job_id
    answer = await _ask(h, _query(head))
    assert answer is not None and answer.outcomes == [] and f"is not its cluster's current job ({later.job_id})" in answer.stale
    assert head.job_id not in h.planner.jobs  # (read, not kept)
    refused = await _ask(h, _query(head), principal="prov-b")
    assert refused is not None and refused.refused and not refused.stale
    assert await _ask(h, _query(head), tenant="other") is None  # (no such job of that tenant)
