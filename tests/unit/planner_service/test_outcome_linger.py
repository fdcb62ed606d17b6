"""How long the planner lets a batch of task events wait for more (`Planner.linger`, given to its
batch consumer): while an outcome's job has other attempts claimed and not ended, so that a
wave's outcomes from several provisioners are taken in one step, one save and one publish."""

from __future__ import annotations

from contracts import subjects
from contracts.commands import CreateCluster
from contracts.events import TaskClaimed, TaskSucceeded
from contracts.tasks import TaskMessage
from muster.ports.eventlog import Append, Recorded
from services.planner.app import PlannerConfig

from .planner_harness import Harness

LINGER_S = 0.005


def _common(m: TaskMessage, provisioner: str) -> dict[str, object]:
    return dict(job_id=m.job_id, task_id=m.task_id, attempt=m.attempt, provisioner=provisioner, worker=f"{provisioner}/w0")


async def _write(h: Harness, m: TaskMessage, event: TaskClaimed | TaskSucceeded, kind: str) -> Recorded:
    subject = subjects.task_events(m.tenant, m.job_id, m.task_id, event.provisioner)
    await h.log.append(subject, [Append(event, msg_id=f"{m.job_id}.{m.task_id}.{m.attempt}.{kind}")])
    return h.log.records[-1]


async def _wave(linger_s: float) -> tuple[Harness, list[TaskMessage]]:
    """A create whose first wave is queued and held by the workers."""
    h = Harness(PlannerConfig(instance="planner-test", outcome_linger_s=linger_s))
    h.behaviour = lambda m: "hold"
    await h.send(CreateCluster(name="c1", template="hadoop-small", nodes=3))
    await h.settle()
    assert len(h.held) >= 2
    return h, h.held


async def test_an_outcome_waits_while_another_attempt_of_its_job_is_claimed_and_not_ended() -> None:
    h, (first, second, *_) = await _wave(LINGER_S)
    await _write(h, first, TaskClaimed(**_common(first, "p1")), "claim.1")  # type: ignore[arg-type]
    await _write(h, second, TaskClaimed(**_common(second, "p2")), "claim.1")  # type: ignore[arg-type]
    await h.settle()  # the planner has seen both claims
    one = await _write(h, first, TaskSucceeded(**_common(first, "p1")), "outcome")  # type: ignore[arg-type]
    assert h.planner.linger([one]) == LINGER_S  # the second is on its way: wait for it
    two = await _write(h, second, TaskSucceeded(**_common(second, "p2")), "outcome")  # type: ignore[arg-type]
    assert h.planner.linger([one, two]) == 0  # nothing of the job left out: take them now
    await h.settle()
    assert h.planner.linger([one]) == 0  # (taken: nothing claimed and not ended is left)


async def test_a_claim_in_the_same_batch_counts_and_claims_alone_never_wait() -> None:
    h, (first, second, *_) = await _wave(LINGER_S)
    claim = await _write(h, second, TaskClaimed(**_common(second, "p2")), "claim.1")  # type: ignore[arg-type]
    await _write(h, first, TaskClaimed(**_common(first, "p1")), "claim.1")  # type: ignore[arg-type]
    one = await _write(h, first, TaskSucceeded(**_common(first, "p1")), "outcome")  # type: ignore[arg-type]
    assert h.planner.linger([claim]) == 0  # no outcome: nothing to save together
    assert h.planner.linger([h.log.records[-2], claim, one]) == LINGER_S


async def test_without_a_linger_outcomes_are_taken_as_they_come() -> None:
    h, (first, second, *_) = await _wave(0.0)
    await _write(h, first, TaskClaimed(**_common(first, "p1")), "claim.1")  # type: ignore[arg-type]
    await _write(h, second, TaskClaimed(**_common(second, "p2")), "claim.1")  # type: ignore[arg-type]
    await h.settle()
    one = await _write(h, first, TaskSucceeded(**_common(first, "p1")), "outcome")  # type: ignore[arg-type]
    assert h.planner.linger([one]) == 0
