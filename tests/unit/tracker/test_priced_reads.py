"""A job's answer with a cost (`services/tracker/priced.py`) reads the job's plan from the log
once, not at each answer: a waiting job's `muster status`, console page and events are asked
for again and again, and each read decoded its whole `JobPlanned` (its tasks too). A job not yet
planned is read again; the plans held stay bounded by jobs and by nodes."""

from __future__ import annotations

from typing import Any

from contracts import subjects
from contracts.events import JobPlanned
from contracts.layout import NodeSpec
from contracts.records import Append
from muster.ports.memory import MemoryEventLog
from muster.readmodel.priced import masked
from services.tracker.priced import Plans, events_shown, status_shown

T = "acme"
COST = {"per_hour": 0.35, "before_per_hour": 0.3, "per_node": {"s1": 0.05, "s2": 0.05, "s3": 0.05, "l1": 0.2},
        "by_hardware": {"small": 0.15, "large": 0.2}, "unknown": []}


def hidden(name: str) -> bool:
    return name == "large"


def node(node_id: str, hardwaretype: str) -> NodeSpec:
    return NodeSpec(id=node_id, hardwaretype=hardwaretype, imagetype="i", services=[])


class Counting(MemoryEventLog):
    """The in-memory log, counting the reads of each subject filter."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: dict[str, int] = {}

    async def read(self, subject_filter: str, start_seq: int = 1, up_to_seq: int | None = None) -> Any:
        self.reads[subject_filter] = self.reads.get(subject_filter, 0) + 1
        return await super().read(subject_filter, start_seq, up_to_seq)


async def plan(log: MemoryEventLog, job_id: str) -> None:
    planned = JobPlanned(job_id=job_id, tasks=[], links=[], stages=[],
                         nodes=[node("s1", "small"), node("s2", "small"), node("s3", "small"), node("l1", "large")],
                         previous_nodes=[node("s1", "small"), node("s2", "small"), node("l1", "large")])
    await log.append(subjects.job_events(T, job_id), [Append(planned, f"{job_id}:planned")])


async def test_a_jobs_answers_read_its_plan_once() -> None:
    log = Counting()
    await plan(log, "j1")
    plans = Plans(log)
    status = {"id": "j1", "approval": {"rules": ["r"], "cost": COST, "cost_now": COST}}
    answers = [await status_shown(plans, T, "j1", status, hidden) for _ in range(3)]
    page = [{"type": "JobApprovalRequested", "event": {"job_id": "j1", "cost": COST}}]
    events = await events_shown(plans, T, "j1", page, hidden)
    assert log.reads == {subjects.job_events(T, "j1"): 1}, log.reads  # it was one read per answer
    shown = masked(COST, hidden, {"s1": "small", "s2": "small", "s3": "small", "l1": "large"}, ["small", "small", "large"])
    assert all(a["approval"]["cost"] == shown == a["approval"]["cost_now"] for a in answers) and shown["per_hour"] == 0.15
    assert events[0]["event"]["cost"] == shown


async def test_a_job_not_yet_planned_is_read_again_and_its_plan_once_it_is_there() -> None:
    log = Counting()
    plans = Plans(log)
    assert await plans.of(T, "j1") == ({}, [])
    await plan(log, "j1")
    target, previous = await plans.of(T, "j1")
    assert target["l1"] == "large" and previous == ["small", "small", "large"]
    assert log.reads[subjects.job_events(T, "j1")] == 2


async def test_the_plans_held_are_bounded_by_jobs_and_by_nodes() -> None:
    log = Counting()
    for job_id in ("j1", "j2", "j3"):
        await plan(log, job_id)
    plans = Plans(log, most=2)
    for job_id in ("j1", "j2", "j3", "j1"):
        await plans.of(T, job_id)
    assert log.reads[subjects.job_events(T, "j1")] == 2 and len(plans._held) == 2  # j1 made room for j3
    small = Plans(log, most_nodes=10)  # 7 nodes a plan (4 once done, 3 before): one at a time
    for job_id in ("j1", "j2"):
        await small.of(T, job_id)
    assert small.nodes <= 10 and list(small._held) == [(T, "j2")]
    assert (await Plans(log, most_nodes=5).of(T, "j1"))[0]  # a plan larger than the bound is answered, not kept


async def test_a_plan_read_for_the_answer_already_is_not_read_again() -> None:
    """An answer made from the log (no planner answered) read the job's events whole: its plan
    is kept from them."""
    log = Counting()
    await plan(log, "j1")
    plans = Plans(log)
    plans.seen(T, "j1", await log.read(subjects.job_events(T, "j1")))
    target, previous = await plans.of(T, "j1")
    assert len(target) == 4 and len(previous) == 3 and log.reads[subjects.job_events(T, "j1")] == 1
