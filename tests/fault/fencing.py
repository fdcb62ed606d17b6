"""No two planners act on one cluster at once, checked from the log (not assumed from the code).

Every event a planner appends names it (`Muster-Writer`, its instance). Who may write for a job
is in the log too: the planner that accepted it (`JobRequested.planner`), then each planner
that adopted it (`JobAdopted.planner`: the new owner's first write, after it gained the shard).
So, walking the whole log in order:

- an event on a job's subject (or its layout subject) must be written by the job's owner of
  record at that point; a `JobAdopted` by the planner it names; a final job belongs to no one
  in particular (its shard may have moved without a word): whoever retries it (`JobRetried`)
  owns it from then on, and what is written for it while it is final is counted, not judged;
- an event on a cluster's subject that names a job (`job_id`: layout, status, config,
  observations) by that job's owner of record (a cluster event written just before the
  `JobRequested` it points to: by the planner that then records it); one that names no job
  (node results, lease changes) by the owner of the cluster's current job while it is open.

A planner cut off from the bus whose lease lapsed must stop writing: anything it wrote after
another planner adopted its jobs, or that landed after (a write buffered in a partition and
delivered on heal), breaks the first two rules and is reported with both names.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from nats.aio.client import Client
from nats.js.api import ConsumerConfig, DeliverPolicy

from contracts import subjects
from contracts.events import FINAL_JOB_EVENTS
from contracts.records import H_WRITER, Recorded


def _kind_and_id(subject: str) -> tuple[str, str] | None:
    """`muster.evt.<tenant>.<kind>.<id>[...]` -> (kind, id)."""
    parts = subject.split(".")
    return (parts[3], parts[4]) if len(parts) >= 5 and parts[0] == "muster" and parts[1] == "evt" else None


@dataclass
class Fencing:
    writes: Counter[str] = field(default_factory=Counter)
    """Planner -> events it wrote."""
    adoptions: int = 0
    reopened: int = 0
    """Final jobs retried (`JobRetried`): the planner holding the shard then owns the job."""
    unattributed: int = 0
    """Events of a job (or its cluster) written while the job was final: not judged."""
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (f"planner writes {dict(self.writes)}; {self.adoptions} adoptions; {self.reopened} retried; "
                f"{self.unattributed} unattributed; "
                f"{len(self.problems)} fencing problems")


async def writers(nc: Client, timeout: float = 120.0) -> dict[int, str]:
    """Log sequence -> the writer named on it, for every event that names one (headers only)."""
    js = nc.jetstream(timeout=30.0)
    info = await js.stream_info(subjects.EVENTS_STREAM)
    last = info.state.last_seq
    out: dict[int, str] = {}
    if not last:
        return out
    done = asyncio.get_running_loop().create_future()

    async def on_msg(msg: object) -> None:
        meta = msg.metadata  # type: ignore[attr-defined]
        writer = (msg.headers or {}).get(H_WRITER)  # type: ignore[attr-defined]
        if writer:
            out[meta.sequence.stream] = writer
        if meta.sequence.stream >= last and not done.done():
            done.set_result(None)

    sub = await js.subscribe(subjects.ALL_EVENTS, cb=on_msg, ordered_consumer=True, idle_heartbeat=2.0,
                             deliver_policy=DeliverPolicy.ALL, config=ConsumerConfig(headers_only=True))
    try:
        await asyncio.wait_for(done, timeout)
    finally:
        await sub.unsubscribe()
    return out


def check_fencing(log: list[Recorded], written_by: dict[int, str]) -> Fencing:
    report = Fencing()
    requester = {r.event.job_id: r.event.planner for r in log if r.type == "JobRequested"}
    owner: dict[str, str] = {}  # job -> its owner of record so far
    ended: set[str] = set()  # jobs final at this point of the log
    current: dict[str, str] = {}  # cluster -> the job it points to
    for r in log:
        found = _kind_and_id(r.subject)
        if found is None:
            continue
        kind, key = found
        job_named = getattr(r.event, "job_id", None)
        if kind == "cluster" and job_named:
            current[key] = job_named
        job = key if kind in ("job", "layout") else (job_named or current.get(key, "")) if kind == "cluster" else ""
        writer = written_by.get(r.seq)
        if writer is not None:
            report.writes[writer] += 1
            if job:
                _judge(report, r, kind, job, writer, owner, requester, ended)
        if kind == "job":
            if r.type == "JobRequested":
                owner.setdefault(key, r.event.planner)
            elif r.type in FINAL_JOB_EVENTS:
                ended.add(key)
            elif r.type == "JobRetried":
                ended.discard(key)
    return report


def _judge(report: Fencing, r: Recorded, kind: str, job: str, writer: str, owner: dict[str, str],
           requester: dict[str, str], ended: set[str]) -> None:
    """One planner-written event of `job` (its own, its layout's, or its cluster's)."""
    if kind == "job" and r.type == "JobAdopted":
        report.adoptions += 1
        if r.event.planner != writer:
            report.problems.append(f"seq {r.seq}: {writer} recorded that {r.event.planner} adopted job {job}")
        owner[job] = r.event.planner
    elif kind == "job" and r.type == "JobRetried":
        report.reopened += 1  # a final job belongs to no one in particular: its retrier owns it now
        owner[job] = writer
    elif job in ended:
        report.unattributed += 1  # (the cluster's events just before a retry reopens the job)
    else:
        expected = owner.get(job) or requester.get(job)
        if expected is not None and writer != expected:
            report.problems.append(f"seq {r.seq} ({r.type} on {r.subject}): written by {writer} while {expected} "
                                   f"owned job {job}")


def writes_by(log: list[Recorded], written_by: dict[int, str], writer: str) -> dict[str, list[int]]:
    """Subject -> sequences `writer` wrote there (for a scenario's own assertions)."""
    out: dict[str, list[int]] = defaultdict(list)
    for r in log:
        if written_by.get(r.seq) == writer:
            out[r.subject].append(r.seq)
    return out
