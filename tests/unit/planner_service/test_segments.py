"""Segments in the planner (docs/decisions/0058), on the harness's fakes: a node's run of tasks
queued in one save and sent as one message; every path that sends queued work again sends a
segment whole from its first step without an outcome, never a follower alone; a failed step's
followers go with its retry or end without using an attempt; a follower's timeout runs from the
outcome before it."""

from __future__ import annotations

from collections import Counter
from typing import Any

from planner_harness import Harness, published

from contracts import subjects
from contracts.commands import Accepted, CreateCluster, PauseJob, ResumeJob
from contracts.events import JobSucceeded, TaskQueued
from contracts.tasks import TaskMessage
from services.planner.app import PlannerConfig
from services.planner.domain import segments
from services.planner.domain.saga import Attempt


def _harness(**config: Any) -> Harness:
    return Harness(config=PlannerConfig(instance="p1", segments=True, **config))


async def _create(h: Harness, nodes: int = 2) -> str:
    reply = await h.send(CreateCluster(name="seg", template="hadoop-small", nodes=nodes))
    assert isinstance(reply, Accepted)
    await h.settle()
    return reply.job_id


def _queued(h: Harness, job_id: str) -> list[TaskQueued]:
    return [r.event for r in h.job_records(job_id) if r.type == "TaskQueued"]


def _closed_before_ended(h: Harness, job_id: str) -> None:
    """Every follower ended unrun has its `StepClosed` on its attempt's subject, stored before its
    end in the same save (docs/decisions/0058): a late copy of its segment cannot claim it."""
    job = h.job(job_id)
    ends = {(r.event.task_id, r.event.attempt): r.seq for r in h.job_records(job_id)
            if r.type == "TaskAttemptFailed" and r.event.error in segments.UNRUN}
    timed_out = {(r.event.task_id, r.event.attempt) for r in h.job_records(job_id)
                 if r.type == "TaskAttemptFailed" and r.event.state == "timed_out"}  # (closed too: decision 59)
    closed = {(r.event.task_id, r.event.attempt): r for r in h.log.records if r.type == "StepClosed"}
    assert ends and set(closed) - timed_out == set(ends)
    for (task_id, attempt), r in closed.items():
        assert r.subject == subjects.step_closed(job.tenant, job_id, task_id, attempt)
        assert (task_id, attempt) in timed_out or r.seq < ends[(task_id, attempt)]


def _no_follower_alone(h: Harness, job_id: str, sent: list[TaskMessage]) -> None:
    """Each message's head is a step whose step before it (if any) had its outcome taken when
    it was sent: never a follower before its head."""
    after = {(q.task_id, q.attempt): q.after for q in _queued(h, job_id)}
    for m in sent:
        before = after.get((m.task_id, m.attempt))
        assert before is None or m.again, (m.task_id, before)


async def test_a_create_sends_a_nodes_run_of_tasks_as_one_message_and_runs_each_once() -> None:
    h = _harness()
    sent = published(h)
    job_id = await _create(h)
    assert isinstance(h.final(job_id), JobSucceeded)
    queued = _queued(h, job_id)
    assert len(sent) < len(queued) / 2  # (a 2-node create: 28 tasks)
    first = next(m for m in sent if m.action.value == "create")
    assert [s.action.value for s in first.then] == ["confirm", "bootstrap", "install", "configure"]
    assert first.segment == f"{first.task_id}.1" and not first.again
    followers = {q.task_id: q.after for q in queued if q.after is not None}
    assert followers[first.then[0].task_id] == first.task_id and followers[first.then[1].task_id] == first.then[0].task_id
    claims = Counter(r.event.task_id for r in h.log.records if r.type == "TaskClaimed")
    assert claims and set(claims.values()) == {1}
    assert len(h.ran_segments) == sum(1 for m in sent if m.then)


async def test_segments_off_queue_each_task_alone() -> None:
    h = Harness(config=PlannerConfig(instance="p1", segments=False))
    sent = published(h)
    job_id = await _create(h)
    assert isinstance(h.final(job_id), JobSucceeded)
    assert not any(m.then or m.segment for m in sent) and len(sent) == len(_queued(h, job_id))


async def test_a_restarted_planner_sends_each_segment_from_its_first_step_without_an_outcome() -> None:
    h = _harness()
    # Each node's create and confirm ran (their outcomes in the log, taken), then the segment's
    # provisioner went silent at bootstrap: the planner dies.
    h.behaviour = lambda m: "silent" if m.action.value == "bootstrap" else "succeed"
    job_id = await _create(h)
    job = h.job(job_id)
    stuck = [t for t, s in job.task_state.items() if s == "queued" and t.endswith("bootstrap")]
    assert len(stuck) == 2 and all(job.segment_after.get(t, "").endswith("confirm") for t in stuck)
    sent = published(h)
    h.behaviour = lambda m: "hold"
    await h.restart()
    await h.settle()
    heads = [m for m in sent if m.task_id.endswith("bootstrap")]
    assert len(heads) == 2 and all(m.again for m in heads)
    assert all([s.action.value for s in m.then] == ["install", "configure"] for m in heads)
    assert all(m.segment is not None and m.segment.endswith("create.1") for m in heads)  # the first head's key
    assert not any(m.task_id.endswith(("install", "configure")) and m.task_id not in {s.task_id for x in heads for s in x.then}
                   for m in sent if m.action.value in ("install", "configure") and m.then == [])
    _no_follower_alone(h, job_id, sent)


async def test_the_republish_of_a_redelivered_outcome_sends_segments_whole() -> None:
    h = _harness()
    h.behaviour = lambda m: "hold" if m.action.value == "create" else "succeed"
    job_id = await _create(h)
    sent = published(h)
    # An outcome of another task delivered again: the job's queued attempts go out again.
    job, cluster = h.job(job_id), h.cluster(h.job(job_id).cluster_id)
    queued = [Attempt(t, job.attempts[t]) for t, s in job.task_state.items() if s == "queued"]
    await h.planner.execution.publish_many(job, cluster, await h.planner.state.catalog_of(job), [(a, None) for a in queued],
                                           again=True)
    assert sent and all(m.action.value == "create" and m.then for m in sent)  # never a follower alone
    assert len(sent) == 2


async def test_a_failed_steps_followers_end_without_using_an_attempt_and_go_with_its_retry() -> None:
    h = _harness()
    failed: set[str] = set()

    def behaviour(m: TaskMessage) -> str:
        if m.action.value == "bootstrap" and m.task_id not in failed:
            failed.add(m.task_id)
            return "fail"
        return "succeed"
    h.behaviour = behaviour
    sent = published(h)
    job_id = await _create(h)
    assert isinstance(h.final(job_id), JobSucceeded)
    ended = [r.event for r in h.job_records(job_id) if r.type == "TaskAttemptFailed" and r.event.state == "cancelled"]
    assert sorted(e.task_id.split(".", 1)[1] for e in ended) == ["configure.base", "configure.base", "install.base", "install.base"]
    assert all(e.error == segments.STRANDED for e in ended)
    _closed_before_ended(h, job_id)
    retries = [m for m in sent if m.action.value == "bootstrap" and m.attempt == 2]
    assert len(retries) == 2 and all([s.action.value for s in m.then] == ["install", "configure"] for m in retries)
    job = h.job(job_id)
    for m in retries:  # the followers ran once, and that run is the only attempt they used
        assert all(job.attempts_left(s.task_id) == job.max_attempts - 1 for s in m.then)
    claims = Counter(r.event.task_id for r in h.log.records if r.type == "TaskClaimed")
    assert {t for t, n in claims.items() if n > 1} == {m.task_id for m in retries}


async def test_a_step_out_of_attempts_ends_its_followers_cancelled_and_the_job_rolls_back() -> None:
    h = _harness(max_attempts=1)
    h.behaviour = lambda m: "fail" if m.action.value == "bootstrap" else "succeed"
    job_id = await _create(h)
    job = h.job(job_id)
    assert job.is_final and job.state in ("failed", "rolled_back"), job.state
    ended = [r.event for r in h.job_records(job_id) if r.type == "TaskAttemptFailed" and r.event.state == "cancelled"]
    assert sorted(e.task_id.split(".", 1)[1] for e in ended) == ["configure.base", "configure.base", "install.base", "install.base"]
    assert all(e.error == segments.STRANDED for e in ended)


async def test_a_followers_timeout_runs_from_the_outcome_before_it() -> None:
    h = _harness(task_timeout_s=100.0)
    h.behaviour = lambda m: "hold"
    job_id = await _create(h)
    job = h.job(job_id)
    armed = {key[2] for key in h.planner.timers.armed("timeout")}
    creates = {t for t in job.task_state if t.endswith("create")}
    assert armed == creates  # the followers wait: no timer yet
    await h.clock.advance(90)
    h.behaviour = lambda m: "silent" if m.action.value == "confirm" else "succeed"
    await h.release()  # the creates succeed at t=90; their confirms are claimed and go silent
    confirms = {t for t in job.task_state if t.endswith("confirm")}
    assert {key[2] for key in h.planner.timers.armed("timeout")} == confirms
    await h.clock.advance(95)  # 185 s after the segment was queued, 95 after the create's outcome
    assert "TaskAttemptFailed" not in h.history(job_id)
    await h.clock.advance(10)
    timed_out = [r.event.task_id for r in h.job_records(job_id) if r.type == "TaskAttemptFailed" and r.event.state == "timed_out"]
    assert sorted(timed_out) == sorted(confirms)


def test_the_queue_key_of_a_segment_is_its_first_heads_whatever_step_it_is_sent_from() -> None:
    from muster.ports.taskqueue import task_msg_id
    from services.provisioner.plugins.testing import make_task

    step = make_task("install", service="s").model_copy(update={"job_id": "j", "task_id": "n1.install.s"})
    assert task_msg_id(step) == "j.n1.install.s.1"
    assert task_msg_id(step.model_copy(update={"segment": "n1.create.1"})) == "j.n1.create.1"


async def test_a_pause_takes_effect_at_a_segments_end() -> None:
    """A pause stops dispatch; a segment already sent runs to its end (its followers were
    dispatched with its head), and nothing after it is queued until the job resumes."""
    h = _harness()
    h.behaviour = lambda m: "hold"
    job_id = await _create(h)
    assert isinstance(await h.send(PauseJob(job_id=job_id)), Accepted)
    await h.settle()
    queued_before = len(_queued(h, job_id))
    h.behaviour = lambda m: "succeed"
    await h.release()  # the held segments run, each to its end
    job = h.job(job_id)
    assert job.paused and not job.is_final
    done = {t for t, s in job.task_state.items() if s == "succeeded"}
    assert {t.split(".", 1)[1] for t in done} == {"create", "confirm", "bootstrap", "install.base", "configure.base"}
    assert len(_queued(h, job_id)) == queued_before  # nothing new while paused
    assert isinstance(await h.send(ResumeJob(job_id=job_id)), Accepted)
    await h.settle()
    assert isinstance(h.final(job_id), JobSucceeded)


async def test_no_segment_is_formed_for_a_job_a_concurrency_limit_counts() -> None:
    """A limit counts tasks queued and not finished: a follower would count from its head's
    dispatch, so a job a limit counts queues each task alone, through the limit."""
    h = _harness(tenant_limit=4)
    sent = published(h)
    job_id = await _create(h)
    assert isinstance(h.final(job_id), JobSucceeded)
    assert sent and not any(m.then or m.segment for m in sent)
    assert all(q.after is None for q in _queued(h, job_id))


async def test_a_lost_queue_sends_again_only_the_segments_none_of_whose_steps_is_claimed() -> None:
    from muster.ports.memory import MemoryTaskQueue
    from services.planner.app import REQUEUE_GRACE_S

    h = _harness()
    running = "n1000.create"  # its segment's head claimed, then silent: it runs on, with its followers
    h.behaviour = lambda m: "silent" if m.task_id == running else "hold"
    await _create(h, nodes=3)
    h.held.clear()
    h.queue = h.planner.execution.queue = MemoryTaskQueue()
    await h.planner.queue_lost()
    await h.clock.advance(REQUEUE_GRACE_S)
    again = h.queue.messages
    assert sorted(m.task_id for m in again) == ["n1001.create", "n1002.create"]
    assert all(m.again and [s.action.value for s in m.then] == ["confirm", "bootstrap", "install", "configure"]
               for m in again)
    assert not any(m.task_id.startswith("n1000.") or any(s.task_id.startswith("n1000.") for s in m.then) for m in again)


def _backlog(h: Harness) -> tuple[int, int]:
    queues = h.planner.metrics.snapshot(h.clock.now())
    return sum(q["queue_length"] for q in queues), sum(q["in_progress"] for q in queues)


async def test_a_follower_is_in_the_backlog_only_once_the_step_before_it_succeeded_and_leaves_it_when_it_ends() -> None:
    """The autoscaler reads the backlog: a follower can be taken by no other provisioner while
    its segment runs, so it counts from the success before it; one ended unrun counts no more."""
    h = _harness(max_attempts=1)
    h.behaviour = lambda m: "hold"
    await _create(h)
    assert _backlog(h) == (2, 0)  # the two creates, not their followers
    h.behaviour = lambda m: "silent" if m.action.value == "bootstrap" else "succeed"
    await h.release()  # create and confirm succeed; each bootstrap is claimed and goes silent
    assert _backlog(h) == (0, 2)
    await h.clock.advance(h.config.task_timeout_s + 1)  # the bootstraps time out: their followers end
    await h.settle()
    assert _backlog(h) == (0, 0)


async def test_a_segment_whose_publish_failed_goes_out_whole_from_the_republish_timer() -> None:
    """The republish timer names the head alone, which needs no nodes map (a create); its
    followers do (bootstrap, installs): the map is fetched for every step the message carries."""
    h = _harness()
    h.queue.fail(lambda m: m.task_id == "n1000.create", TimeoutError("lost"), times=1)
    job_id = await _create(h)
    assert not [m for m in h.queue.messages if m.task_id == "n1000.create"]
    await h.clock.advance(1.0)  # the republish timer's first try (0.25 s)
    await h.settle()
    [create] = [m for m in h.queue.messages if m.task_id == "n1000.create"]
    assert [s.task_id for s in create.then][:2] == ["n1000.confirm", "n1000.bootstrap"] and create.again
    assert create.then[1].nodes_ref is not None  # (a bootstrap reads the nodes map)
    assert isinstance(h.final(job_id), JobSucceeded)


async def test_a_timed_out_steps_followers_end_saying_they_may_still_run_late() -> None:
    """A step that timed out may still be running (its provisioner cut off): it would go on with
    its followers, late, as a stale attempt. Their end says so (the log is read by the fault
    suite's invariants: a follower ended as never to run is never claimed), and their run,
    should it come, changes nothing."""
    h = _harness(task_timeout_s=100.0)
    h.behaviour = lambda m: "silent" if m.task_id == "n1000.create" and m.attempt == 1 else "succeed"
    job_id = await _create(h)
    [late] = [m for m in h.queue.messages if m.task_id == "n1000.create" and m.attempt == 1]
    await h.clock.advance(101)
    await h.settle()
    ended = [e for e in h.events(job_id, "TaskAttemptFailed") if e.state == "cancelled"]
    assert ended and {e.task_id for e in ended} == {s.task_id for s in late.then}
    assert all(e.error == segments.STRANDED_BY_TIMEOUT for e in ended)
    _closed_before_ended(h, job_id)
    assert isinstance(h.final(job_id), JobSucceeded)
    job = h.job(job_id)
    view = job.view()
    # Its provisioner comes back and runs the segment on, late: nothing changes.
    outcome = next(r for r in h.log.records if r.type == "TaskSucceeded" and r.event.task_id == "n1000.create")
    await h._work(late.model_copy(update={"then": []}), "succeed")
    for step in late.then:
        await h._work(TaskMessage.model_construct(**dict(step)), "succeed")
    await h.settle()
    assert h.job(job_id).view() == view and outcome.event.attempt == 2
