"""The tracker's read caches stay bounded whatever the size of the jobs asked about: the answers
of `GET /v1/jobs/{id}` by count and bytes, the task locations by jobs and task records."""

from __future__ import annotations

from contracts import subjects
from contracts.catalog import Action
from contracts.events import TaskClaimed, TaskQueued
from contracts.records import Append
from muster.ports.memory import MemoryEventLog
from services.tracker.answers import Answer, Answers
from services.tracker.tasks import TaskLocations

T = "acme"


def answer(size: int, version: int = 1) -> Answer:
    return Answer(0.0, version, True, b"x" * size)


def test_answers_never_hold_more_than_their_count_or_their_bytes() -> None:
    answers = Answers(most=3, most_bytes=1000)
    for i in range(10):
        answers.put((T, f"j{i}"), answer(100))
        assert len(answers) <= 3 and answers.bytes <= 1000
    assert [answers.get((T, f"j{i}")) is not None for i in (6, 7, 8, 9)] == [False, True, True, True]
    answers.put((T, "big"), answer(900))  # room is made by dropping the least recently used
    assert answers.bytes <= 1000 and answers.get((T, "big")) is not None
    assert answers.get((T, "j7")) is None and answers.get((T, "j9")) is not None


def test_an_answer_larger_than_the_budget_is_not_kept_and_replaces_the_jobs_older_one() -> None:
    answers = Answers(most=3, most_bytes=1000)
    answers.put((T, "j"), answer(100, version=1))
    answers.put((T, "j"), answer(5000, version=2))
    assert answers.get((T, "j")) is None and answers.bytes == 0 and len(answers) == 0
    answers.put((T, "j"), answer(300, version=3))
    answers.put((T, "j"), answer(200, version=4))
    got = answers.get((T, "j"))
    assert got is not None and got.version == 4 and answers.bytes == 200


async def job_with_tasks(log: MemoryEventLog, job_id: str, tasks: int) -> None:
    for i in range(tasks):
        task_id = f"n{i}.create"
        await log.append(subjects.job_events(T, job_id), [Append(TaskQueued(job_id=job_id, task_id=task_id, attempt=1, node=f"n{i}",
                                                                             action=Action.CREATE), msg_id=f"{job_id}-q{i}")])
        await log.append(subjects.task_events(T, job_id, task_id, "p1"),
                         [Append(TaskClaimed(job_id=job_id, task_id=task_id, attempt=1, provisioner="p1", worker="w"),
                                 msg_id=f"{job_id}-c{i}")])


async def test_task_locations_keep_at_most_their_records_but_always_the_job_asked_last() -> None:
    log = MemoryEventLog()
    for job_id, tasks in (("a", 30), ("b", 30), ("c", 80)):
        await job_with_tasks(log, job_id, tasks)
    locations = TaskLocations(log, kept=4, kept_records=70)
    assert len(await locations.of(T, "a")) == 30
    assert len(await locations.of(T, "b")) == 30
    assert locations.held == (2, 60)
    assert len(await locations.of(T, "c")) == 80  # larger than the bound alone: kept, the others dropped
    assert locations.held == (1, 80)
    assert len(await locations.of(T, "a", with_queued=False)) == 30
    assert locations.held == (1, 30)
    for job_id in ("a", "b", "a"):
        await locations.of(T, job_id)
        jobs, records = locations.held
        assert records <= 70 and jobs <= 4
