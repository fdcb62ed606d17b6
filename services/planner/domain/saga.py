"""The job's saga as decisions (pure): given a job, its cluster and what happened (an answer
from the solver, a task outcome, a timeout, a control request), change the aggregates and say
what must follow.

A decision changes the Job and Cluster aggregates, which hold the new events until they are
recorded (eventsourcing's pending events), and returns `Effects`: the attempts to publish and
the timers to disarm. The service layer (`execution.py`) only executes: it records the events
first, then publishes, then arms the attempts' timeouts; so a restarted planner re-publishes
exactly what the log says is queued.

Dispatch goes through a `DispatchPolicy`, the place where a limit (per provider, per pool) or
a wait (resources not granted yet) holds ready tasks back: held tasks stay unqueued, and the
next `advance` of the job (an outcome, a grant, `Planner.nudge`) looks at them again.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from contracts.catalog import Action, Catalog, Service
from contracts.commands import COMMAND_ADAPTER, VERB_OF, CancelJob, JobCommand, PauseJob, ResumeJob, RetryJob
from contracts.events import (
    TIMED_OUT_PREFIX,
    LayoutSolved,
    LayoutUnsolvable,
    NodeResult,
    TaskAttemptFailed,
    TaskCompleted,
    TaskFailed,
    TaskSucceeded,
)
from muster.readmodel import lifecycle
from muster.readmodel.observed import state_of

from . import segments
from .admission import Refused
from .cluster import Cluster
from .errors import PlanError
from .job import UNDO, Job
from .observed import desired_after, expected_state
from .operations import OPERATIONS
from .planning import plan_layout, planned
from .resize import layout_of


@dataclass(frozen=True)
class Attempt:
    task_id: str
    attempt: int


@dataclass
class Effects:
    """What follows a decision, once the aggregates' new events are recorded."""

    dispatch: list[Attempt] = field(default_factory=list)
    """Newly queued attempts: publish each, then arm its timeout."""
    republish_queued: bool = False
    """The job's queued attempts may never have got out (an outcome delivered again): publish
    them again (the queue's de-duplication makes this harmless). A flag, not the list: a job of
    10,000 nodes has thousands queued, and the adapter decides how often that is worth it."""
    disarm: list[Attempt] = field(default_factory=list)
    """Attempts whose timeout no longer matters."""
    ask_layout: bool = False
    """The job asks the solver for another layout (`JobLayoutRetried`)."""

    def __iadd__(self, other: Effects) -> Effects:
        self.dispatch += other.dispatch
        self.republish_queued |= other.republish_queued
        self.disarm += other.disarm
        self.ask_layout |= other.ask_layout
        return self


@dataclass(frozen=True)
class Settings:
    """The planner's settings a decision needs."""

    provisioner_class: str = "default"
    mode: str = "eager"
    segments: bool = False
    """A node's run of tasks that only it lets go goes as one unit (`PlannerConfig.segments`, on
    unless MUSTER_SEGMENTS=0; off here, for the domain's tests, which say when they want it)."""


class DispatchPolicy(Protocol):
    def admit(self, job: Job, cluster: Cluster, ready: Sequence[str]) -> Sequence[str]:
        """The ready tasks that may be queued now (a subset, in order)."""
        ...


@runtime_checkable
class CountsInFlight(Protocol):
    """A policy that counts a job's tasks in flight against a limit (`limits.Limits`)."""

    def counts(self, job: Job, cluster: Cluster) -> bool:
        """Whether a limit counts this job's tasks."""
        ...


def _counted(policy: DispatchPolicy, job: Job, cluster: Cluster) -> bool:
    """Whether a policy counts the job's tasks in flight: then no segment is formed (a follower
    would be in flight, by the limit's count, from its head's dispatch: docs/decisions/0058)."""
    if isinstance(policy, Chain):
        return any(_counted(p, job, cluster) for p in policy.policies)
    return isinstance(policy, CountsInFlight) and policy.counts(job, cluster)


class DispatchAll:
    def admit(self, job: Job, cluster: Cluster, ready: Sequence[str]) -> Sequence[str]:
        return ready


DISPATCH_ALL = DispatchAll()


class Chain:
    """Policies one after another: each sees what the previous ones let through (a pool's grant,
    then the concurrency limits, which count only what is really queued)."""

    def __init__(self, *policies: DispatchPolicy) -> None:
        self.policies = policies

    def admit(self, job: Job, cluster: Cluster, ready: Sequence[str]) -> Sequence[str]:
        for policy in self.policies:
            ready = policy.admit(job, cluster, ready)
        return ready


def advance(job: Job, cluster: Cluster, services: Mapping[str, Service], settings: Settings,
            policy: DispatchPolicy = DISPATCH_ALL) -> Effects:
    """Take the job one step: finish, roll back, or queue what is ready."""
    if not job.is_final:
        if job.state == "running" and job.stopping and job.in_flight == 0:
            # who cancelled, as an approval's rejection names its decider (it said "by request")
            reason = f"cancelled by {job.cancelled_by or 'request'}" if job.cancel_requested else exhausted_reason(job)
            if not job.planned:  # cancelled before it had a plan: nothing ran, nothing to undo
                return fail_unplanned(job, cluster, reason)
            job.plan_rollback(reason, services)
        if job.state == "running" and job.all_done:
            _succeeded(job, cluster)
        elif job.state == "rolling_back" and job.exhausted:
            reason = f"rollback failed: {exhausted_reason(job)} (after: {job.error})"
            record_moves(job, cluster)
            job.needs_attention(reason)
            cluster.set_status("needs_attention", str(job.id), reason)
        elif job.state == "rolling_back" and job.all_done and job.may_relayout:
            return _relayout(job, cluster)
        elif job.state == "rolling_back" and job.all_done:
            _rolled_back(job, cluster)
    klass = queue_class(cluster, settings)
    admitted = policy.admit(job, cluster, job.ready())
    index = job._index() if settings.segments and admitted and not _counted(policy, job, cluster) else None
    effects = Effects()
    for head in admitted:
        effects.dispatch.append(Attempt(head, job.queue(head, klass).attempt))
        # Each head's followers right after it: a wave saved in parts has its first segments
        # whole, and sent, after its first parts (a segment goes out whole: docs/decisions/0058).
        before = head
        for t in index.segment(head) if index is not None else ():
            effects.dispatch.append(Attempt(t, job.queue(t, klass, after=before).attempt))
            before = t
    return effects


def queue_class(cluster: Cluster, settings: Settings) -> str:
    """The provisioner class a cluster's tasks are queued on (decided when it was created)."""
    return cluster.provisioner_class or settings.provisioner_class


REASON_ERROR_MAX = 300
"""Characters of a task's error the job's reason carries (the task's events keep all of it)."""


def exhausted_reason(job: Job) -> str:
    """Which task stopped the job and why, so that every place the reason reaches (the job's
    status over HTTP, `muster status`, the console, the events) names the problem itself."""
    task = job.exhausted[0]
    times = job.attempts[task] - job.retry_base.get(task, 0)
    said = f"task {task} failed {times} times"
    if task in job.permanent:  # its plugin said so: retrying would only fail the same way
        said = f"task {task} failed{f' {times} times' if times > 1 else ''}, not retried: its plugin says a retry cannot succeed"
    error = " ".join(job.last_errors.get(task, "").split())
    if len(error) > REASON_ERROR_MAX:
        error = error[:REASON_ERROR_MAX - 1].rstrip() + "…"
    said = f"{said}: {error}" if error else said
    failed = job.failed_nodes  # a rolling change: the first task out of attempts may have been within it
    if job.tolerance and len(failed) > job.tolerance:
        said = f"{job.operation} failed on {len(failed)} node(s), past its tolerance of {job.tolerance}: " \
               f"{', '.join(failed[:5])}{f' and {len(failed) - 5} more' if len(failed) > 5 else ''}; {said}"
    return said


def record_moves(job: Job, cluster: Cluster) -> None:
    """What the job did to each service on each node, once, as it ends (`ServicesMoved`), with
    the config each configure carried (a rollback's, the one it put back: as `tasks.py`
    sends it), before the cluster's config is put back; with who had the services its macros
    name (the layout the tasks ran on: the provisioner expanded them against it)."""
    layout = cluster.layout()
    forward, back = lifecycle.digest(cluster.config, layout), lifecycle.digest(job.previous_config or cluster.config, layout)
    done = [(t.node, t.service, t.action, back if i.startswith(UNDO) else forward)
            for i, t in job.tasks.items() if t.service and job.task_state.get(i) == "succeeded" and i not in job.moved]
    cluster.services_moved(str(job.id), lifecycle.moves(cluster.services_state, done))


def _succeeded(job: Job, cluster: Cluster) -> None:
    failed = job.failed_nodes  # within the tolerance (before `succeed`, which ends "running")
    record_moves(job, cluster)
    job.succeed()
    op = OPERATIONS[job.operation]
    if op.shrinking:
        cluster.change_layout(str(job.id), [] if job.operation == "delete" else job.nodes)
    cluster.desire(str(job.id), desired_after(job, cluster))
    if op.observes:  # a check only looks: the cluster stays as it was
        cluster.set_status(cluster.status, str(job.id), cluster.status_reason)
        return
    reason = f"{job.operation} did not finish on {len(failed)} node(s), within its tolerance of {job.tolerance}: " \
             f"{', '.join(failed)}" if failed else ""
    cluster.set_status("deleted" if job.operation == "delete" else "active", str(job.id), reason)


def _rolled_back(job: Job, cluster: Cluster) -> None:
    record_moves(job, cluster)
    why = ("; no other layout was tried: the job's plan was approved, and another layout would be a plan nobody approved "
           "(ask again)") if job.could_relayout else ""
    job.finish_rollback(why)
    if job.operation == "create" and not job.attempts:
        # Nothing was ever sent (a create cancelled while it waited for a pool's hosts: docs/pools.md,
        # "Giving up"), so nothing was made: the cluster ends, as one whose wait the pool ended,
        # and its name is free. A create that sent something keeps its name, `failed`, until deleted.
        waited = f" while it waited for hosts of pool {job.resources['pool']}" if job.resources else ""
        cluster.change_layout(str(job.id), [])
        cluster.set_status("deleted", str(job.id), f"{job.operation} {job.error}{waited}: nothing was made; its name is free")
        return
    gone = job.deleted_nodes()
    cluster.change_layout(str(job.id), [n for n in job.previous_nodes if n.id not in gone])
    cluster.change_config(str(job.id), job.previous_config or cluster.config)
    status = "failed" if job.operation == "create" else "incomplete" if gone else "active"
    said = f"; {', '.join(sorted(gone))} deleted all the same (a delete cannot be undone)" if gone else ""
    cluster.set_status(status, str(job.id), f"{job.operation} rolled back: {job.error}{said}")


def _relayout(job: Job, cluster: Cluster) -> Effects:
    """The rollback is done: the cluster back as it was, and another layout asked for, excluding
    the one that failed (the target nodes of the plan)."""
    failed = layout_of(job.nodes)
    reason = job.error
    record_moves(job, cluster)  # (what the rollback left: the next layout starts from it)
    job.retry_layout(failed)
    cluster.change_layout(str(job.id), job.previous_nodes)
    cluster.change_config(str(job.id), job.previous_config or cluster.config)
    cluster.set_status(cluster.status, str(job.id), f"{job.operation} rolled back ({reason}); asking for another layout "
                                                    f"({job.layout_round} of {job.relayouts})")
    return Effects(ask_layout=True)


def fail_unplanned(job: Job, cluster: Cluster, reason: str) -> Effects:
    """A job that never got a plan (no layout, a planning error) fails; a new cluster with it."""
    job.fail(reason)
    status = "failed" if job.operation == "create" else cluster.status
    cluster.set_status(status, str(job.id), reason)
    return Effects()


def queued_attempts(job: Job) -> list[Attempt]:
    return [Attempt(t, job.attempts[t]) for t, state in job.task_state.items() if state == "queued"]


# -- outcomes --------------------------------------------------------------------------------


def take_outcome(job: Job, cluster: Cluster, event: TaskSucceeded | TaskFailed, services: Mapping[str, Service],
                 settings: Settings, policy: DispatchPolicy = DISPATCH_ALL) -> Effects:
    """A worker's result. One that changes nothing is a redelivery (or a superseded attempt's
    late result); if a redelivery, what we did with it the first time may have been recorded
    without its task messages getting out (a failed publish, an ack lost in a failover), so the
    job's queued attempts are published again."""
    return take_outcomes(job, cluster, [event], services, settings, policy)


def take_outcomes(job: Job, cluster: Cluster, events: Sequence[TaskSucceeded | TaskFailed], services: Mapping[str, Service],
                  settings: Settings, policy: DispatchPolicy = DISPATCH_ALL) -> Effects:
    """Several results, in the order given, then one step of the job: the same events as
    taking each alone would record, except that what becomes ready is queued once at the end
    (a wave of outcomes is one save, not one per outcome). Results after the job ended change
    nothing.

    The step is taken even when every result was taken before (a redelivery): a save cut short
    may have recorded the results and not what they let go (a chained save's prefix, the first
    part of a save split in parts), and only the step records that. On a job whose log is
    whole it finds nothing to do."""
    effects = Effects()
    results: list[NodeResult] = []  # the wave's node results, recorded in a few events, not one an outcome
    for event in events:
        if job.is_final:
            break
        effects += _take(job, cluster, event, settings, results)
    cluster.record_many(results)
    if job.segment_after and any(isinstance(e, TaskFailed) for e in events):
        effects.disarm += [Attempt(*a) for a in segments.end_stranded(job)]
    effects += advance(job, cluster, services, settings, policy)
    return effects


def _take(job: Job, cluster: Cluster, event: TaskSucceeded | TaskFailed, settings: Settings,
          results: list[NodeResult]) -> Effects:
    effects = Effects(disarm=[Attempt(event.task_id, event.attempt)])
    task = job.tasks.get(event.task_id)
    if task is not None and task.action is Action.STATUS and job.is_current(event.task_id, event.attempt):
        event = _observed(job, cluster, event)
    if isinstance(event, TaskSucceeded):
        done = TaskCompleted(job_id=event.job_id, task_id=event.task_id, attempt=event.attempt,
                             result=event.result, ipaddresses=event.ipaddresses, hostname=event.hostname)
        if not job.complete(done):
            effects.republish_queued = True
            return effects
        results.append(NodeResult(node_id=job.tasks[event.task_id].node, task_id=event.task_id, result=event.result,
                                  ipaddresses=event.ipaddresses, hostname=event.hostname))
    else:
        failed = TaskAttemptFailed(job_id=event.job_id, task_id=event.task_id, attempt=event.attempt, error=event.error,
                                   may_have_made=event.may_have_made or _leaves_machine(job, cluster, event.task_id),
                                   permanent=event.permanent)
        if not job.fail_attempt(failed):
            effects.republish_queued = True
            return effects
        effects += after_failure(job, cluster, event.task_id, settings)
    return effects


def _leaves_machine(job: Job, cluster: Cluster, task_id: str) -> bool:
    """A create that failed on a node that has a machine, in a cancelled job: no cleanup deletes
    it (`after_failure`), so the rollback must."""
    task = job.tasks.get(task_id)
    return (job.cancel_requested and task is not None and task.action is Action.CREATE
            and bool(cluster.results.get(task.node, {}).get("providerid")))


def _observed(job: Job, cluster: Cluster, event: TaskSucceeded | TaskFailed) -> TaskSucceeded | TaskFailed:
    """A `status` task's outcome: record the state it found; a state other than the one the job
    needs (after a start: running) is a failed attempt."""
    task = job.tasks[event.task_id]
    expected = expected_state(job, event.task_id)
    if isinstance(event, TaskFailed):
        state, detail = state_of("unknown"), event.error
    else:
        state, detail = state_of(event.result.get("state")), str(event.result.get("detail", ""))
    cluster.observe(str(job.id), event.task_id, task.node, task.service or "", state, expected, detail)
    if isinstance(event, TaskSucceeded) and expected is not None and state != expected:
        return TaskFailed(job_id=event.job_id, task_id=event.task_id, attempt=event.attempt, provisioner=event.provisioner,
                          worker=event.worker, error=f"{task.service} is {state} on {task.node}, not {expected}"
                          + (f": {detail}" if detail else ""))
    if isinstance(event, TaskSucceeded):  # its state is an observation, not a result of the node
        return event.model_copy(update={"result": {}})
    return event


def time_out(job: Job, cluster: Cluster, attempt: Attempt, timeout_s: float, services: Mapping[str, Service],
             settings: Settings, policy: DispatchPolicy = DISPATCH_ALL) -> Effects | None:
    """A worker silent past the timeout: the attempt fails (None if it is no longer current)."""
    if job.is_final or not job.is_current(attempt.task_id, attempt.attempt):
        return None
    error = f"{TIMED_OUT_PREFIX} {timeout_s:g}s"
    job.fail_attempt(TaskAttemptFailed(job_id=str(job.id), task_id=attempt.task_id, attempt=attempt.attempt, error=error,
                                       state="timed_out"))
    effects = after_failure(job, cluster, attempt.task_id, settings)
    effects.disarm += [Attempt(*a) for a in segments.end_stranded(job, segments.STRANDED_BY_TIMEOUT)]
    effects += advance(job, cluster, services, settings, policy)
    return effects


def after_failure(job: Job, cluster: Cluster, task_id: str, settings: Settings) -> Effects:
    """A failed create or confirm may have left a machine: delete it before creating again
    (coopr-facts §5.7). Other failures are simply retried by `advance`."""
    task = job.tasks[task_id]
    if job.cancel_requested and job.state == "running":
        # Nothing more is queued under a closed fence (its claim would be refused): the rollback
        # deletes the node instead (a create that failed with a machine counts as made, `_take`).
        return Effects()
    if task_id in job.cleanups.values():
        if job.attempts_left(task_id) > 0:  # the cleanup itself failed: delete again
            q = job.queue(task_id, queue_class(cluster, settings))
            return Effects(dispatch=[Attempt(q.task_id, q.attempt)])
        return Effects()  # out of attempts: the job stops, and its rollback deletes the machine
    if job.attempts_left(task_id) <= 0 or task.action not in (Action.CREATE, Action.CONFIRM):
        return Effects()
    if task.action is Action.CONFIRM and _created_by(task_id) not in job.tasks:
        return Effects()  # a repair's confirm of a node the cluster has: never delete it to make it again
    if not cluster.results.get(task.node, {}).get("providerid"):
        return Effects()
    cleanup = job.queue_cleanup(task_id)
    return Effects(dispatch=[Attempt(cleanup.task_id, cleanup.attempt)])


def _created_by(confirm_id: str) -> str:
    """The id of the create a confirm follows in its plan (its phase's prefix kept)."""
    return confirm_id.removesuffix(Action.CONFIRM.value) + Action.CREATE.value


def close_claims(job: Job, cluster: Cluster, claimed: Collection[tuple[str, int]], services: Mapping[str, Service],
                 settings: Settings, policy: DispatchPolicy = DISPATCH_ALL,
                 lost: Mapping[tuple[str, int], str] | None = None) -> Effects:
    """The cancel's fence is closed (`ClaimsClosed` stored): every queued forward attempt not in
    `claimed` (the claims the log holds before the fence) ends `cancelled`, every one in `lost`
    (each of its claimers gone for good, docs/decisions/0054) ends failed as maybe made, their
    timeouts disarmed, and the job takes its next step (its rollback, once nothing claimed is in
    flight)."""
    ended = job.cancel_unclaimed(claimed) + job.lose_claimed(lost or {})
    effects = Effects(disarm=[Attempt(t, job.attempts[t]) for t in ended])
    effects += advance(job, cluster, services, settings, policy)
    return effects


# -- the solver's answer ---------------------------------------------------------------------


def take_layout(job: Job, cluster: Cluster, answer: LayoutSolved | LayoutUnsolvable, catalog: Catalog,
                settings: Settings, policy: DispatchPolicy = DISPATCH_ALL) -> Effects:
    """Record the plan made from the solver's layout and dispatch; or fail the job."""
    if isinstance(answer, LayoutUnsolvable) and job.layout_round:  # the layouts tried were all there was
        # layout_round counts the layouts that failed: it said "after 1 other layout(s)" when the
        # one layout tried had failed and the solver had no other
        reason = (f"{job.operation} rolled back after {job.layout_round} layout(s) that failed, with no other to try: "
                  f"{answer.message}")
        job.no_other_layout(reason)
        cluster.set_status("failed" if job.operation == "create" else "active", str(job.id), reason)
        return Effects()
    if isinstance(answer, LayoutUnsolvable):
        return fail_unplanned(job, cluster, f"no layout: {answer.message}")
    try:
        plan, target = plan_layout(job, cluster, catalog, answer.layout, COMMAND_ADAPTER.validate_python(job.request))
    except PlanError as err:
        return fail_unplanned(job, cluster, f"planning failed: {err}")
    problem = lifecycle.invalid(cluster.services_state, [(t.node, t.service, t.action) for t in plan.tasks])
    if problem:
        return fail_unplanned(job, cluster, f"planning failed: {problem}")
    job.record_plan(planned(job, cluster, plan, target, settings.mode))
    if not OPERATIONS[job.operation].shrinking:
        cluster.change_layout(str(job.id), target)
    return advance(job, cluster, catalog.services, settings, policy)


# -- job control -----------------------------------------------------------------------------


def retriable(job: Job, cluster: Cluster, since: Sequence[Job] = ()) -> None:
    """A retry runs on the cluster as its job left it: refused once another job has been
    admitted on the cluster since (its plan was made on what that job changed, or it runs now),
    or the cluster is gone. `since`: the cluster's jobs after `job`, in order; checks that ended
    only looked, and the cluster is as `job` left it (a user who checked what runs after a
    rollback was refused the retry)."""
    looked = bool(since) and str(since[-1].id) == cluster.job_id and all(
        OPERATIONS[j.operation].observes and j.is_final for j in since)
    if cluster.job_id != str(job.id) and not looked:
        # Names the last job and how to retry it: a walk of session 27 read only "is not cluster
        # 'c1''s last job" and had to find which one was.
        last = cluster.job_id
        raise Refused(f"job {job.id} is not the last job of cluster {cluster.name!r}: its last job is {last}, which came "
                      "after it and left the cluster as it is; ask for the operation again (or `muster job retry "
                      f"{last}` if that one is to retry)", code="conflict", field="job_id")
    if cluster.status == "deleted":
        raise Refused(f"cluster {cluster.name!r} is deleted: job {job.id} has nothing left to retry", code="conflict",
                      field="job_id")


_ENDED = {"succeeded": "has succeeded (it ended)", "failed": "has failed (it ended)",
          "rolled_back": "was rolled back (it ended)", "needs_attention": "ended needing attention"}


def control_refusal(job: Job, verb: str) -> str:
    """Why `verb` does nothing to this job, in words: an ended job has nothing to control."""
    if job.is_final and verb == "retry" and job.state in ("failed", "rolled_back"):
        return (f"job {job.id} {_ENDED[job.state]} before it had an approved plan: nothing to retry; "
                "ask for the operation again")
    if job.is_final:
        return f"job {job.id} {_ENDED.get(job.state, 'ended')}: nothing to {verb}"
    if verb == "resume":
        return f"job {job.id} is {job.shown}, not paused: nothing to resume"
    if verb == "pause" and job.paused:
        return f"job {job.id} is paused already"
    if verb == "cancel" and job.cancel_requested:
        return f"job {job.id} is being cancelled already"
    return f"job {job.id} is {job.shown}: cannot {verb} it"


def control(job: Job, cluster: Cluster, cmd: JobCommand, by: str, services: Mapping[str, Service],
            settings: Settings, policy: DispatchPolicy = DISPATCH_ALL, catalog_seq: int | None = None,
            since: Sequence[Job] = ()) -> Effects:
    """Pause, resume, cancel or retry; refused when the job's state does not allow it. A retry
    runs with the catalog at `catalog_seq` from then on (`services` are that catalog's); `since`:
    the cluster's jobs after it (`retriable`)."""
    if isinstance(cmd, RetryJob):
        retriable(job, cluster, since)
        changed = job.retry(by, cmd.request_id, catalog_seq)
    else:
        changed = {PauseJob: job.pause, ResumeJob: job.resume, CancelJob: job.cancel}[type(cmd)](by, cmd.request_id)
    if not changed and isinstance(cmd, RetryJob) and job.state == "needs_attention":
        raise Refused(f"job {cmd.job_id} needs attention with no rollback to retry (it stopped before one began: "
                      f"{job.error}); `muster cluster delete` removes what it made", code="conflict")
    if not changed:
        raise Refused(control_refusal(job, VERB_OF[cmd.type]), code="conflict")  # type: ignore[attr-defined]
    if isinstance(cmd, RetryJob) and job.state == "rolling_back":  # the rest of its rollback: the layout stays
        cluster.set_status(cluster.status, str(job.id), f"job {job.id} retries its rollback ({job.error})")
    elif isinstance(cmd, RetryJob):  # back to the layout the job was taking the cluster to
        if not OPERATIONS[job.operation].shrinking:
            cluster.change_layout(str(job.id), job.nodes)
        cluster.set_status(cluster.status, str(job.id))
    return advance(job, cluster, services, settings, policy)
