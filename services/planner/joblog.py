"""A job in the log: its own events on the job's subject, its task records (`TaskQueued`,
`TaskCompleted`, `TaskAttemptFailed`) one token under it (`subjects.job_subject`), so that the
consumers of job events (the tracker's index, the notifier) never receive them.

The fence (docs/decisions/0033): every append of a job is fenced on the last sequence of the
job's own subject, and every batch the planner appends to a job holds at least one message on
that subject (a `TasksRecorded` marker when it holds only task records), which a chain sends
first. So each append that lands moves the fence, and a planner whose view of the job missed
any of them (a stale owner, a copy that lost an ack) is refused, as when the job had one subject.
"""

from __future__ import annotations

from collections.abc import Sequence

from contracts import subjects
from contracts.events import StepClosed, TaskAttemptFailed, TasksRecorded
from muster.bus.appends import MAX_ATOMIC
from muster.bus.repository import fence, mark_stored
from muster.ports.eventlog import Append, EventLog, Recorded

from .domain.job import UNRUN, Job

Entries = list[tuple[str, Append]]
Part = tuple[str, Sequence[Append], "int | None"]


def entries(job: Job, appends: Sequence[Append], *, lead: bool = False) -> Entries:
    """Each append with its subject; a `TasksRecorded` marker first when none is on the job's
    subject (`lead`: when the first is not: a chain's first link must move the fence)."""
    own = subjects.job_events(job.tenant, str(job.id))
    out: Entries = []
    for a in appends:
        if closes(a.event):
            out.append(_step_closed(job, a))
        out.append((subjects.job_subject(job.tenant, str(job.id), str(getattr(a.event, "type"))), a))  # noqa: B009
    if out and (out[0][0] != own if lead else all(s != own for s, _ in out)):
        first = out[0][1]
        records = subjects.job_tasks(job.tenant, str(job.id))
        marker = Append(event=TasksRecorded(job_id=str(job.id), count=sum(s == records for s, _ in out)),
                        msg_id=f"{first.msg_id}:t", time=first.time, trace=first.trace)
        out.insert(0, (own, marker))
    return out


def closes(event: object) -> bool:
    """Whether saving this event stores a `StepClosed` before it (`_step_closed`)."""
    return isinstance(event, TaskAttemptFailed) and event.error in UNRUN


def _chunks(appends: Sequence[Append]) -> list[Sequence[Append]]:
    """Runs of appends whose entries fit one atomic batch: room for a marker, and a
    `StepClosed` more for each follower ended unrun."""
    out, start, size = [], 0, 0
    for i, a in enumerate(appends):
        cost = 2 if closes(a.event) else 1
        if size + cost > MAX_ATOMIC - 1:
            out.append(appends[start:i])
            start, size = i, 0
        size += cost
    return [*out, appends[start:]] if appends else out


def _step_closed(job: Job, ended: Append) -> tuple[str, Append]:
    """A segment's follower ended unrun (`segments.end_stranded`): its `StepClosed`, stored just
    before the end, in the same save, so that no provisioner claims it after (its claim goes with
    the step before's outcome, which expects this subject empty: docs/decisions/0058). Before,
    not after: a save cut short (a chain's prefix) may close a step it has not ended, which only
    stops what the planner was ending anyway; never the reverse."""
    event = ended.event
    assert isinstance(event, TaskAttemptFailed)
    subject = subjects.step_closed(job.tenant, str(job.id), event.task_id, event.attempt)
    closed = StepClosed(job_id=str(job.id), task_id=event.task_id, attempt=event.attempt)
    return subject, Append(closed, msg_id=f"{ended.msg_id}:closed", time=ended.time, trace=ended.trace)


async def append(log: EventLog, job: Job, appends: Sequence[Append]) -> None:
    """The job's new events, in atomic batches of at most `MAX_ATOMIC`, each fenced on the one
    before (a job's own events alone go as they always did: one publish, or one batch)."""
    own = subjects.job_events(job.tenant, str(job.id))
    for chunk in _chunks(appends):
        items = entries(job, chunk)
        expect = fence(job, own, chunk)
        if all(s == own for s, _ in items):
            seqs = await log.append(own, [a for _, a in items], expect_last_seq=expect)
        else:
            seqs = await log.append_fenced(items, expect, own)
        mark_stored(job, seqs[-1], chunk[-1].version, fence=_last_own(own, items, seqs))


async def append_after(log: EventLog, job: Job, appends: Sequence[Append], before: Sequence[tuple[str, Append]],
                       expect_before: int) -> list[int]:
    """`before` (another aggregate's new events, on one subject, fenced on `expect_before`) and
    the job's new events in one atomic batch, each fenced on its own subject as if saved alone:
    one store where there were two (docs/decisions/0045). At most `MAX_ATOMIC` in all. Returns
    the sequences of `before`."""
    own = subjects.job_events(job.tenant, str(job.id))
    items = entries(job, appends)
    expect = fence(job, own, appends)
    seqs = await log.append_fenced([*before, *items], expect_before, before[0][0], more=[(len(before), expect, own)])
    mine = seqs[len(before):]
    mark_stored(job, mine[-1], appends[-1].version, fence=_last_own(own, items, mine))
    return seqs[: len(before)]


def chain_parts(job: Job, appends: Sequence[Append]) -> list[Part]:
    """The job's new events as parts of a chain (`EventLog.append_chain`): runs of one subject,
    the first on the job's own subject and fenced."""
    parts: list[tuple[str, list[Append], int | None]] = []
    own = subjects.job_events(job.tenant, str(job.id))
    for subject, item in entries(job, appends, lead=True):
        if parts and parts[-1][0] == subject:
            parts[-1][1].append(item)
        else:
            parts.append((subject, [item], None if parts else fence(job, own, appends)))
    return list(parts)


def chained(job: Job, parts: Sequence[Part], seqs: Sequence[Sequence[int]]) -> None:
    """The job's chain stored (`chain_parts`, and what `append_chain` answered for them)."""
    own = subjects.job_events(job.tenant, str(job.id))
    flat = [(s, a) for s, items, _ in parts for a in items]
    got = [seq for part in seqs for seq in part]
    versions = [a.version for _, a in flat if a.version is not None]
    mark_stored(job, got[-1], versions[-1] if versions else None, fence=_last_own(own, flat, got))


def _last_own(own: str, items: Entries, seqs: Sequence[int]) -> int:
    return max(seq for (subject, _), seq in zip(items, seqs, strict=True) if subject == own)


async def history(log: EventLog, tenant: str, job_id: str, start_seq: int = 1) -> list[Recorded]:
    """The job's events and task records from `start_seq` on, in log order."""
    first, records = await log.read(subjects.job_events(tenant, job_id), start_seq=start_seq), []
    if first or start_seq > 1:  # (a job that is not there has no records either)
        records = await log.read(subjects.job_tasks(tenant, job_id), start_seq=start_seq)
    return sorted([*first, *records], key=lambda r: r.seq) if records else first
