"""What must hold after any fault, checked by replaying the WHOLE log (reusable: any test with a
NATS connection can call `check`).

1. Every job reached a final state (succeeded, failed, rolled back, needs attention), and its
   story is whole: it starts with `JobRequested`; after a final event only `JobRetried` follows.
2. Every task attempt the planner queued (`TaskQueued` / `CleanupQueued`, task id + attempt, on
   the job's subject) was queued once and has exactly one outcome recorded by the planner
   (`TaskCompleted` or `TaskAttemptFailed`); an outcome has a queued attempt. The only allowed
   exception: the job ended (a final event) while the attempt was in flight — listed by name in
   `Report.ended_in_flight`. Every `TaskCompleted` has the provisioner's `TaskSucceeded` for the
   same attempt; every `TaskAttemptFailed` has its `TaskFailed`, or is a timeout (listed), or
   ended an attempt a cancel's fence found unclaimed (then no claim of it is in the log at all),
   or ended a segment's follower unrun (then its `StepClosed` is in the log, and no claim of it
   after that: decision 58),
   or ended a claimed attempt of a cancelled job whose provisioners had all gone (listed;
   decision 54).
3. State rebuilt from the log equals what the services report: each job's view from its owner
   (`muster.q.<tenant>.<principal>.job.<id>`) equals `rebuild(Job, ...)`.view() (a planner holds each
   cluster's current job; a finished older job may go unanswered: the tracker reads it from the
   log, and is compared when running); each cluster rebuilt from
   the log equals the cluster of a planner freshly rebuilt from the log (`Planner.resume`), and
   the tracker's `GET /v1/clusters/{id}` and `GET /v1/jobs/{id}` when a tracker URL is given.
4. Tenants are isolated: no event on a tenant's subjects names another tenant's cluster or job
   id, and an event's own `tenant` field is its subject's tenant. (`_system` subjects are
   shared by design: a pool's decisions name every tenant's requests.)
5. Resource pools (`pool_invariants.py`): no host is ever lent twice, quotas hold at every
   step, and each pool rebuilt from the log equals what a pool service reports.
6. No two planners act on one cluster at once (`fencing.py`): every event a planner wrote for a
   job or cluster was written by the job's owner of record at that point in the log.
7. Versions only go up: on every aggregate's subject the versions are 1, 2, 3... in log order
   (a cluster's version is what readers compare, `if_version`).

`check` returns a `Report`; `Report.problems` lists every violation in words (empty = all hold).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import ssl
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from contracts import subjects
from contracts.events import FINAL_JOB_EVENTS, LOST_PREFIX
from muster.bus.connect import bearer_headers, principal_of
from muster.bus.eventstore import EventStore, Recorded
from muster.bus.repository import rebuild
from muster.bus.shards import BUCKET as LEASES
from muster.readmodel.jobs import job_view
from services.planner.app import PlannerConfig
from services.planner.domain.cluster import Cluster
from services.planner.domain.job import Job
from services.planner.domain.segments import UNRUN
from services.planner.entrypoint import nats_planner

from .fencing import Fencing, check_fencing, writers
from .history import History, HistoryReport, check_history
from .pool_invariants import compare_with_service, pool_problems

FINAL = FINAL_JOB_EVENTS
QUEUED = ("TaskQueued", "CleanupQueued")
PLANNER_OUTCOMES = ("TaskCompleted", "TaskAttemptFailed")
UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TRACKER_TENANT_HEADER = "X-Muster-Tenant"
AT_ONCE = 64
"""Queries to the planners (and GETs to the tracker) in flight at once. A planner leaves a
finished job that is not its cluster's current one unanswered by design, so each such query
costs a whole timeout: asked one at a time, the ~200 of a 10-minute soak took over 17 minutes."""


@dataclass
class Report:
    events: int = 0
    jobs: Counter[str] = field(default_factory=Counter)
    """Final state -> number of jobs."""
    attempts: int = 0
    retries: int = 0
    """Attempts after the first of a task."""
    outcomes: Counter[str] = field(default_factory=Counter)
    timed_out: list[str] = field(default_factory=list)
    provisioner_lost: list[str] = field(default_factory=list)
    """Claimed attempts of cancelled jobs ended because every provisioner that claimed them had
    gone (their presence ended; docs/decisions/0054)."""
    ended_in_flight: list[str] = field(default_factory=list)
    """Attempts without a planner outcome because their job had ended first (allowed)."""
    redelivered: int = 0
    """Attempts a provisioner claimed more than once (its worker died or the bus failed it)."""
    late_results: int = 0
    """Provisioner outcomes of attempts the planner had already closed (recorded, ignored)."""
    overlapping: int = 0
    """Tasks that two provisioners ran at the same time (claim to outcome, in log order): an
    attempt that timed out at the planner while its provisioner, cut off, still ran it; or an
    attempt queued again after a lost queue (decision 13). Allowed, and counted."""
    compared: Counter[str] = field(default_factory=Counter)
    lost: int = 0
    """Attempts queued that never got an outcome (and whose job had not ended): goal 0."""
    duplicates: int = 0
    """Attempts dispatched twice, or with more than one outcome: goal 0."""
    fencing: Fencing = field(default_factory=Fencing)
    history: HistoryReport | None = None
    """What the clients saw, checked against the log (when a history was kept)."""
    not_final: int = 0
    """Jobs that did not reach a final state: goal 0."""
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.events} events; jobs {dict(self.jobs)}; {self.attempts} attempts ({self.retries} retries), "
            f"outcomes {dict(self.outcomes)}; {len(self.timed_out)} timed out; {len(self.provisioner_lost)} lost with their "
            f"provisioner; {self.redelivered} redelivered; "
            f"{self.late_results} late results; {self.overlapping} ran twice at once; {len(self.ended_in_flight)} ended in flight; "
            f"compared {dict(self.compared)}; {self.fencing.summary()}; "
            f"{self.history.summary() + '; ' if self.history else ''}{len(self.problems)} problems"
        )

    def assert_ok(self) -> None:
        assert not self.problems, "invariants violated:\n  " + "\n  ".join(self.problems[:50])


@dataclass(frozen=True)
class Where:
    tenant: str
    kind: str
    id: str
    sub: str = ""


def where(subject: str) -> Where | None:
    parts = subject.split(".")
    if len(parts) < 5 or ".".join(parts[:2]) != subjects.EVT:
        return None
    return Where(parts[2], parts[3], parts[4], ".".join(parts[5:]))


async def check(
    nc: Client,
    *,
    tracker_url: str | None = None,
    planner_running: bool = True,
    query_timeout: float = 5.0,
    tracker_ssl: ssl.SSLContext | None = None,
    client_history: History | None = None,
) -> Report:
    """Replay the whole log and check every invariant (module docstring)."""
    store = EventStore(nc, timeout=30.0)
    # An ordered consumer, not direct gets: on a replicated stream a direct get may be answered
    # by a follower that lags behind (test_found_bugs.py); a consumer reads from the leader.
    log: list[Recorded] = []
    await store.replay(subjects.ALL_EVENTS, log.append)
    report = Report(events=len(log))
    by_subject: dict[str, list[Recorded]] = defaultdict(list)
    for r in log:  # (a job's task records with its own events: one history, in log order)
        by_subject[subjects.fence_subject(r.subject)].append(r)

    jobs: dict[tuple[str, str], Job] = {}
    clusters: dict[tuple[str, str], Cluster] = {}
    owner: dict[str, str] = {}  # cluster or job id -> tenant
    for subject, history in by_subject.items():
        if f".{subjects.CLAIMS}." in subject:
            # A cancel's fence (decision 46): one `ClaimsClosed`, not a history to fold as a job.
            if [r.type for r in history] != ["ClaimsClosed"]:
                report.problems.append(f"{subject}: a cancel's fence holds {[r.type for r in history]}, not one ClaimsClosed")
            continue
        if f".{subjects.STEPS}." in subject and subject.count(".") > subjects.step_closed("t", "j", "x", 1).count("."):
            # A claim's marker (decision 59): `StepOpened`, never stored after its attempt's end.
            closed = by_subject.get(subject.rsplit(".", 1)[0], [])
            if {r.type for r in history} != {"StepOpened"}:
                report.problems.append(f"{subject}: a claim's marker holds {[r.type for r in history]}, not StepOpened")
            elif closed and history[-1].seq > closed[0].seq:
                report.problems.append(f"{subject}: a claim's marker stored after its attempt's StepClosed")
            continue
        if f".{subjects.STEPS}." in subject:
            # An attempt's end (decisions 58, 59): `StepClosed`, not a history to fold as a job.
            if {r.type for r in history} != {"StepClosed"}:
                report.problems.append(f"{subject}: a step's end holds {[r.type for r in history]}, not StepClosed")
            continue
        w = where(subject)
        if w is None:
            report.problems.append(f"{subject}: not a muster event subject")
            continue
        if w.kind in ("job", "cluster", "layout", "task"):
            owner.setdefault(w.id, w.tenant)
            if owner[w.id] != w.tenant:
                report.problems.append(f"id {w.id} is used by tenants {owner[w.id]} and {w.tenant}")
        try:
            if w.kind == "job":
                job = rebuild(Job, history)
                assert job is not None
                jobs[(w.tenant, w.id)] = job
            elif w.kind == "cluster":
                cluster = rebuild(Cluster, history)
                assert cluster is not None
                clusters[(w.tenant, w.id)] = cluster
        except Exception as err:  # noqa: BLE001 - a log that does not fold is itself the finding
            trail = ", ".join(f"{r.seq}:{r.type}@v{r.version}" for r in history[-12:])
            report.problems.append(f"{subject}: the log does not rebuild: {type(err).__name__}: {err}; last events {trail}")

    _check_jobs(report, by_subject, jobs)
    _check_versions(report, by_subject)
    _check_isolation(report, log, owner)
    report.fencing = check_fencing(log, await writers(nc))
    report.problems += report.fencing.problems
    if client_history is not None:
        report.history = check_history(client_history, log)
        report.problems += report.history.problems
    pools_rebuilt, pool_problems_found = pool_problems(log)
    report.problems += pool_problems_found
    compared, differ = await compare_with_service(nc, pools_rebuilt)
    report.compared["pools"] += compared
    report.problems += differ
    if planner_running:
        await _compare_job_views(report, nc, jobs, clusters, query_timeout, by_subject)
    if jobs and all(j.is_final for j in jobs.values()):
        await _compare_fresh_planner(report, nc, jobs, clusters)
    if tracker_url:
        await _compare_tracker(report, tracker_url, jobs, clusters, tracker_ssl)
    return report


# -- 1 and 2: jobs and attempts -----------------------------------------------------------------


def _check_jobs(report: Report, by_subject: dict[str, list[Recorded]], jobs: dict[tuple[str, str], Job]) -> None:
    for (tenant, job_id), job in jobs.items():
        history = by_subject[subjects.job_events(tenant, job_id)]
        name = f"job {job_id} ({tenant}, {job.operation})"
        if job.is_final:
            report.jobs[job.state] += 1
        else:
            report.not_final += 1
            report.problems.append(f"{name} did not reach a final state: {job.state}")
        if history[0].type != "JobRequested":
            report.problems.append(f"{name}: its story starts with {history[0].type}, not JobRequested")
        finals = [i for i, r in enumerate(history) if r.type in FINAL]
        for i in finals:
            after = [r.type for r in history[i + 1:]]
            if after and after[0] != "JobRetried":
                report.problems.append(f"{name}: {after} recorded after {history[i].type}")

        queued: dict[tuple[str, int], Recorded] = {}
        outcomes: dict[tuple[str, int], list[Recorded]] = defaultdict(list)
        for r in history:
            if r.type in QUEUED:
                key = (r.event.task_id, r.event.attempt)
                if key in queued:
                    report.duplicates += 1
                    report.problems.append(f"{name}: attempt {key[1]} of {key[0]} dispatched twice (seq {queued[key].seq} and {r.seq})")
                queued[key] = r
                report.attempts += 1
                report.retries += r.event.attempt > 1
            elif r.type in PLANNER_OUTCOMES:
                outcomes[(r.event.task_id, r.event.attempt)].append(r)
        last_final = history[finals[-1]].seq if finals else None
        for key, r in queued.items():
            got = outcomes.get(key, [])
            if len(got) > 1:
                report.duplicates += 1
                report.problems.append(f"{name}: attempt {key[1]} of {key[0]} has {len(got)} outcomes: {[o.type for o in got]}")
            elif not got:
                if last_final is not None and r.seq < last_final:
                    report.ended_in_flight.append(f"{name}: attempt {key[1]} of {key[0]} (queued at seq {r.seq}) "
                                                  f"was in flight when the job ended ({job.state}) at seq {last_final}")
                else:
                    report.lost += 1
                    report.problems.append(f"{name}: attempt {key[1]} of {key[0]} (seq {r.seq}) has no outcome")
        for key, got in outcomes.items():
            if key not in queued:
                report.problems.append(f"{name}: outcome {got[0].type} of attempt {key[1]} of {key[0]} that was never queued")
            for o in got:
                report.outcomes[o.type] += 1
                _check_provisioner_side(report, by_subject, tenant, job_id, name, o)
        _count_provisioner_side(report, by_subject, tenant, job_id, outcomes)


def _task_history(by_subject: dict[str, list[Recorded]], tenant: str, job_id: str, task_id: str) -> list[Recorded]:
    # One subject per (task, provisioner that wrote on it): gather them in log order.
    prefix = subjects.task_history_filter(tenant, job_id, task_id)[:-1]
    return sorted((r for s, h in by_subject.items() if s.startswith(prefix) for r in h), key=lambda r: r.seq)


def _check_provisioner_side(report: Report, by_subject: dict[str, list[Recorded]], tenant: str, job_id: str,
                            name: str, outcome: Recorded) -> None:
    e = outcome.event
    mine = [r for r in _task_history(by_subject, tenant, job_id, e.task_id) if r.event.attempt == e.attempt]
    types = {r.type for r in mine}
    if outcome.type == "TaskCompleted" and "TaskSucceeded" not in types:
        report.problems.append(f"{name}: TaskCompleted of attempt {e.attempt} of {e.task_id} without a provisioner's TaskSucceeded")
    if outcome.type == "TaskAttemptFailed":
        if e.state == "timed_out":
            report.timed_out.append(f"{name}: attempt {e.attempt} of {e.task_id}")
            # Closed before its end, and never claimed after (decision 59): a claim before it runs
            # late (it was stored before the planner's deadline read the claims, or its deadline
            # counted from it and passed).
            problem = _claimed_after_its_end(by_subject, tenant, job_id, e.task_id, e.attempt, mine)
            if problem:
                report.problems.append(f"{name}: attempt {e.attempt} of {e.task_id} timed out, {problem}")
        elif e.state == "cancelled" and e.error in UNRUN:  # a segment's follower ended unrun (decision 58)
            problem = _claimed_after_its_end(by_subject, tenant, job_id, e.task_id, e.attempt, mine)
            if problem:
                report.problems.append(f"{name}: attempt {e.attempt} of {e.task_id} ended unrun, {problem}")
        elif e.state == "cancelled":  # ended by a cancel's fence, as unclaimed: never claimed, before or after (decision 46)
            if "TaskClaimed" in types:
                report.problems.append(f"{name}: attempt {e.attempt} of {e.task_id} cancelled as unclaimed, and claimed")
        elif e.error.startswith(LOST_PREFIX):  # its claimers all gone, its job cancelled (decision 54)
            report.provisioner_lost.append(f"{name}: attempt {e.attempt} of {e.task_id}")
            if "TaskClaimed" not in types or not e.may_have_made:
                report.problems.append(f"{name}: attempt {e.attempt} of {e.task_id} lost with its provisioner, "
                                       f"but {'never claimed' if 'TaskClaimed' not in types else 'not counted as maybe made'}")
        elif "TaskFailed" not in types:
            report.problems.append(f"{name}: TaskAttemptFailed of attempt {e.attempt} of {e.task_id} without a provisioner's TaskFailed")


def _claimed_after_its_end(by_subject: dict[str, list[Recorded]], tenant: str, job_id: str, task_id: str, attempt: int,
                           mine: list[Recorded]) -> str:
    """What is wrong with a segment's follower the planner ended unrun (its step before failed,
    or timed out), or an attempt that timed out (decision 59), or "": its `StepClosed` is
    stored, and no claim of it after that. A claim
    before it is allowed: a late copy of the segment (a head run past its timeout, a message
    delivered twice) whose step before's success and this claim landed before the planner's end
    (its run a late result); the claim after it is refused (decision 58)."""
    closed = by_subject.get(subjects.step_closed(tenant, job_id, task_id, attempt), [])
    if not closed:
        return "and no StepClosed of it in the log"
    late = [r.seq for r in mine if r.type == "TaskClaimed" and r.seq > closed[0].seq]
    return f"and claimed after its StepClosed (seq {closed[0].seq}) at seq {late}" if late else ""


def _count_provisioner_side(report: Report, by_subject: dict[str, list[Recorded]], tenant: str, job_id: str,
                            outcomes: dict[tuple[str, int], list[Recorded]]) -> None:
    prefix = f"{subjects.EVT}.{tenant}.task.{job_id}."
    per_task: dict[str, list[Recorded]] = {}
    for subject, history in by_subject.items():
        if subject.endswith(f".{subjects.PROGRESS}"):
            continue  # a running attempt's lines: neither a claim nor an outcome
        if subject.startswith(prefix):  # claims of one task may be on several provisioners' subjects
            per_task.setdefault(subject.rsplit(".", 1)[0], []).extend(history)
    for history in per_task.values():
        report.overlapping += _ran_twice_at_once(sorted(history, key=lambda r: r.seq))
        claims = Counter(r.event.attempt for r in history if r.type == "TaskClaimed")
        report.redelivered += sum(1 for n in claims.values() if n > 1)
        for r in history:
            if r.type not in ("TaskSucceeded", "TaskFailed"):
                continue
            planner = outcomes.get((r.event.task_id, r.event.attempt), [])
            if not planner or (planner[0].type == "TaskAttemptFailed" and (planner[0].event.state in ("timed_out", "cancelled")
                                                                            or planner[0].event.error.startswith(LOST_PREFIX))):
                report.late_results += 1


def _ran_twice_at_once(history: list[Recorded]) -> bool:
    """Did two provisioners run this task at once: one claimed it while another's claim had no
    outcome yet (each run from its claim to its own outcome; a run that never ended, its
    provisioner killed, is not counted)?"""
    runs: list[tuple[int, int, str]] = []
    open_runs: dict[tuple[str, int], int] = {}
    for r in history:
        key = (str(r.event.provisioner), int(r.event.attempt))
        if r.type == "TaskClaimed":
            open_runs.setdefault(key, r.seq)
        elif r.type in ("TaskSucceeded", "TaskFailed") and key in open_runs:
            runs.append((open_runs.pop(key), r.seq, key[0]))
    return any(a[2] != b[2] and a[0] < b[0] < a[1] for a in runs for b in runs)


# -- 7: versions ----------------------------------------------------------------------------------


def _check_versions(report: Report, by_subject: dict[str, list[Recorded]]) -> None:
    for subject, history in by_subject.items():
        versioned = [r for r in history if r.version is not None]
        bad = next((i for i, r in enumerate(versioned) if r.version != i + 1), None)
        if bad is not None:
            shown = [r.version for r in versioned[max(0, bad - 2):bad + 2]]
            report.problems.append(f"{subject}: versions go {shown} (seq {versioned[bad].seq})")


# -- 4: tenants ---------------------------------------------------------------------------------


def _check_isolation(report: Report, log: list[Recorded], owner: dict[str, str]) -> None:
    for r in log:
        w = where(r.subject)
        if w is None or w.tenant in (subjects.IDENTITY, subjects.SYSTEM):  # identities name their tenants; pools have none
            continue
        own = getattr(r.event, "tenant", None)
        if own is not None and own != w.tenant:
            report.problems.append(f"seq {r.seq} on {r.subject}: {r.type} names tenant {own!r}")
        text = r.event.model_dump_json()
        for found in set(UUID_RE.findall(text)):
            other = owner.get(found)
            if other is not None and other != w.tenant:
                report.problems.append(f"seq {r.seq} ({w.tenant}, {r.type}) names {other}'s id {found}")


# -- 3: what the services report ----------------------------------------------------------------


def _normal(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


async def _compare_job_views(report: Report, nc: Client, jobs: dict[tuple[str, str], Job],
                             clusters: dict[tuple[str, str], Cluster], timeout: float,
                             by_subject: dict[str, list[Recorded]]) -> None:
    """The owner answers for the jobs it holds: each cluster's current job (a planner loads
    other, finished, jobs only when a request names them). A finished job nobody answers for is
    compared as the tracker answers it then: its events folded by the read model. Every job is
    asked at once (at most `AT_ONCE` in flight), so the unanswered ones cost one timeout, not
    one each."""
    current = {c.job_id for c in clusters.values()}
    gate = asyncio.Semaphore(AT_ONCE)

    async def ask(tenant: str, job_id: str) -> bytes | None:
        async with gate:
            try:
                return (await nc.request(subjects.job_query(tenant, principal_of(nc), job_id), b"{}", timeout=timeout)).data
            except (NoRespondersError, NatsTimeout):
                return None

    keys = list(jobs)
    answers = await asyncio.gather(*(ask(tenant, job_id) for tenant, job_id in keys))
    owed = [i for i, (key, data) in enumerate(zip(keys, answers, strict=True))
            if data is None and (not jobs[key].is_final or key[1] in current)]
    if owed:  # a planner killed just before the check: asked again as its shards are taken
        for i, data in zip(owed, await _asked_again(nc, [keys[i] for i in owed], ask), strict=True):
            answers[i] = data
    for (tenant, job_id), data in zip(keys, answers, strict=True):
        job = jobs[(tenant, job_id)]
        folded = _normal(job.view())
        if data is None:
            if not job.is_final or job_id in current:
                report.problems.append(f"job {job_id} ({tenant}, {job.operation}, {job.state}): no planner answers its query")
                continue
            report.compared["finished jobs read from the log"] += 1
            from_log = _normal(job_view(by_subject.get(subjects.job_events(tenant, job_id), [])))
            if from_log != folded:
                diff = sorted(k for k in set(from_log or {}) | set(folded) if (from_log or {}).get(k) != folded.get(k))
                report.problems.append(f"job {job_id} ({tenant}): the read model's view differs from the aggregate's in {diff}")
            continue
        live = json.loads(data)
        report.compared["planner job views"] += 1
        # The answering planner names itself as the owner: it may have taken the job over from
        # the planner that began it (the log's view names that one).
        folded["owner"] = live.get("owner")
        if live != folded:
            diff = sorted(k for k in set(live) | set(folded) if live.get(k) != folded.get(k))
            report.problems.append(f"job {job_id} ({tenant}): the planner's view differs from the log's in {diff}")


SHARDS_TAKEN_S = 30.0
"""How long a job its owner must answer for may go unanswered while shards move: a planner
killed by the nemesis just before the check is restarted, and its shards are taken again
within a few lease TTLs (3 s in the fault stacks)."""


async def _asked_again(nc: Client, keys: list[tuple[str, str]],
                       ask: Callable[[str, str], Awaitable[bytes | None]]) -> list[bytes | None]:
    """The jobs `keys` asked again each time the `leases` bucket changes (a shard taken, a
    lease renewed), until each is answered or `SHARDS_TAKEN_S` passed: what was not answered
    then is a problem."""
    answers: list[bytes | None] = [None] * len(keys)
    try:
        watcher = await (await nc.jetstream().key_value(LEASES)).watchall(include_history=False)
    except Exception:  # noqa: BLE001 - no bucket (planners without shards): nothing moves, nothing to wait for
        return answers
    try:
        async with asyncio.timeout(SHARDS_TAKEN_S):
            while any(a is None for a in answers):
                await watcher.updates(timeout=None)  # (the one deadline is the block's)
                left = [i for i, a in enumerate(answers) if a is None]
                for i, data in zip(left, await asyncio.gather(*(ask(*keys[i]) for i in left)), strict=True):
                    answers[i] = data
    except TimeoutError:
        pass
    finally:
        await watcher.stop()
    return answers


def _cluster_state(c: Cluster) -> dict[str, Any]:
    return _normal({
        "tenant": c.tenant, "name": c.name, "status": c.status, "job_id": c.job_id, "config": c.config,
        "nodes": {n.id: n.model_dump(mode="json") for n in c.nodes.values()}, "results": c.results,
        "ipaddresses": c.ipaddresses, "hostnames": c.hostnames, "version": c.version,
    })


async def _compare_fresh_planner(report: Report, nc: Client, jobs: dict[tuple[str, str], Job],
                                 clusters: dict[tuple[str, str], Cluster]) -> None:
    """A planner rebuilt from the log (all jobs are final, so `resume` dispatches nothing)."""
    # As the services are configured (their snapshot bucket's replicas), with the patience a
    # cluster that just lost a node needs (a stream's new leader answers after its election).
    config = PlannerConfig(instance="invariants", replicas=int(os.environ.get("MUSTER_REPLICAS", "1")))
    fresh = nats_planner(nc, config, store=EventStore(nc, timeout=30.0))
    try:
        await fresh.resume()
    finally:
        fresh.timers.cancel_all()
    for (tenant, cluster_id), cluster in clusters.items():
        other = fresh.clusters.get(cluster_id)
        report.compared["fresh planner clusters"] += 1
        if other is None:
            report.problems.append(f"cluster {cluster_id} ({tenant}): a planner rebuilt from the log does not know it")
        elif (a := _cluster_state(other)) != (b := _cluster_state(cluster)):
            diff = sorted(k for k in a if a[k] != b[k])
            report.problems.append(f"cluster {cluster_id} ({tenant}): a planner rebuilt from the log sees it differently in {diff}")
    for (tenant, job_id), job in jobs.items():
        other_job = await fresh.find_job(tenant, job_id)
        report.compared["fresh planner jobs"] += 1
        if other_job is None:
            report.problems.append(f"job {job_id} ({tenant}, {job.operation}, {job.state}): a planner rebuilt from the log does not know it")
        elif (a := _normal(other_job.view())) != (b := _normal(job.view())):
            diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            report.problems.append(f"job {job_id} ({tenant}): a planner rebuilt from the log sees it differently in {diff}")


def _tracker_nodes(nodes: list[dict[str, Any]]) -> dict[str, Any]:
    return {n["id"]: (n.get("hardwaretype"), n.get("imagetype"), sorted(n.get("services", []))) for n in nodes}


async def _tracker_get(http: aiohttp.ClientSession, report: Report, path: str, tenant: str, what: str) -> dict[str, Any] | None:
    async with http.get(path, headers={TRACKER_TENANT_HEADER: tenant, **bearer_headers()}) as resp:
        if resp.status != 200:
            report.problems.append(f"{what} ({tenant}): tracker answers {resp.status}")
            return None
        report.compared[f"tracker {what.split()[0]}s"] += 1
        return await resp.json()


async def _compare_tracker(report: Report, url: str, jobs: dict[tuple[str, str], Job],
                           clusters: dict[tuple[str, str], Cluster], context: ssl.SSLContext | None = None) -> None:
    """Concurrently (`AT_ONCE`): the tracker asks the owner of a finished job first, then the log."""
    gate = asyncio.Semaphore(AT_ONCE)
    connector = aiohttp.TCPConnector(ssl=context) if context is not None else None
    async with aiohttp.ClientSession(base_url=url, timeout=aiohttp.ClientTimeout(total=30), connector=connector) as http:

        async def get(path: str, tenant: str, what: str) -> dict[str, Any] | None:
            async with gate:
                return await _tracker_get(http, report, path, tenant, what)

        async def cluster_agrees(tenant: str, cluster_id: str, cluster: Cluster) -> None:
            seen = await get(f"/v1/clusters/{cluster_id}", tenant, f"cluster {cluster_id}")
            if seen is None:
                return
            expected = {"status": cluster.status, "job_id": cluster.job_id, "tenant": cluster.tenant,
                        "nodes": {n.id: (n.hardwaretype, n.imagetype, sorted(n.services)) for n in cluster.nodes.values()}}
            got = {"status": seen.get("status"), "job_id": seen.get("job_id"), "tenant": seen.get("tenant"),
                   "nodes": _tracker_nodes(seen.get("nodes", []))}
            if _normal(got) != _normal(expected):
                diff = sorted(k for k in expected if _normal(got[k]) != _normal(expected[k]))
                report.problems.append(f"cluster {cluster_id} ({tenant}): the tracker differs from the log in {diff}")

        async def job_agrees(tenant: str, job_id: str, job: Job) -> None:
            seen = await get(f"/v1/jobs/{job_id}", tenant, f"job {job_id}")
            if seen is not None and seen.get("state") != job.view()["state"]:
                report.problems.append(f"job {job_id} ({tenant}): the tracker says {seen.get('state')!r}, the log {job.state!r}")

        await asyncio.gather(*(cluster_agrees(t, c, cluster) for (t, c), cluster in clusters.items()),
                             *(job_agrees(t, j, job) for (t, j), job in jobs.items()))
