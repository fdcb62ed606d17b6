"""A job's segments as its log says them (docs/decisions/0058): which queued attempts go in one
task message, from which step, under which de-duplication key; and which followers a failure
left with nothing to carry them.

A segment is a node's run of tasks queued in one save, each a step after the one named by its
`TaskQueued.after`, sent as one message whose head is its first step without an outcome taken:
the provisioner runs them in order. Everything here is read from the job's links
(`Job.segment_after` and `Job.segment_next`), so a restarted planner, or another planner taking
the shard over, sends the same messages: never a follower alone before the step it follows.
Pure: no IO.
"""

from __future__ import annotations

from collections.abc import Iterable

from contracts.events import TaskAttemptFailed

from .job import STRANDED, STRANDED_BY_TIMEOUT, UNRUN, Job

__all__ = ["STRANDED", "STRANDED_BY_TIMEOUT", "UNRUN", "chain", "end_stranded", "groups", "key", "root", "stranded"]


def _queued(job: Job, task_id: str) -> bool:
    return job.task_state.get(task_id) == "queued"


def root(job: Job, task_id: str) -> str:
    """The first step of `task_id`'s segment still queued (itself if none before it is)."""
    links = job.segment_after
    while (before := links.get(task_id)) is not None and _queued(job, before):
        task_id = before
    return task_id


def chain(job: Job, first: str) -> list[str]:
    """`first` and the queued steps that follow it, in order."""
    out, links, following = [first], job.segment_after, job.segment_next
    while (nxt := following.get(out[-1])) is not None and links.get(nxt) == out[-1] and _queued(job, nxt):
        out.append(nxt)
    return out


def key(job: Job, task_id: str) -> str:
    """A segment's de-duplication key: its first head's `<task>.<attempt>` (what its first
    message went under), whichever step it is sent from."""
    links = job.segment_after
    while (before := links.get(task_id)) is not None:
        task_id = before
    return f"{task_id}.{job.attempts.get(task_id, 0)}"


def groups(job: Job, tasks: Iterable[str]) -> list[tuple[list[str], str | None]]:
    """The messages that send the queued attempts of `tasks`: per segment, its steps still
    queued from the first (which may not be among `tasks`: a follower is never sent without the
    steps before it), with its key; a task of no segment alone, with none."""
    out: list[tuple[list[str], str | None]] = []
    seen: set[str] = set()
    for task_id in tasks:
        first = root(job, task_id)
        if first in seen:
            continue
        seen.add(first)
        steps = chain(job, first)
        linked = len(steps) > 1 or first in job.segment_after
        out.append((steps, key(job, first) if linked else None))
    return out


def stranded(job: Job) -> list[str]:
    """Queued followers whose segment stopped: the step before its first queued one failed
    (or ended without running). Its provisioner runs none of them (a step's claim goes only
    with the success before it), and the node's next task waits for them: they end, and the
    retry of the failed step, if any, is a segment of its own that takes them in again."""
    out = []
    for t in [t for t in job.segment_after if _queued(job, t)]:
        before = job.segment_after.get(root(job, t))
        if before is not None and job.task_state.get(before) in ("failed", "cancelled", None):
            out.append(t)
    return out


def end_stranded(job: Job, error: str = STRANDED) -> list[tuple[str, int]]:
    """End every stranded follower `cancelled` (it did not run: no failure, nothing to undo, the
    job waits for it no more, and its attempt is given back). `error`: why (STRANDED_BY_TIMEOUT
    after a timeout: the step before may still run, and this one late after it). The (task,
    attempt) pairs ended."""
    ended = []
    for t in stranded(job):
        attempt = job.attempts[t]
        job.end_follower(TaskAttemptFailed(job_id=str(job.id), task_id=t, attempt=attempt, state="cancelled", error=error))
        ended.append((t, attempt))
    return ended
