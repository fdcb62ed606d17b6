"""Only the provisioner that holds a task's attempt may record its outcome.

A claim and an outcome are written on `muster.evt.<t>.task.<job>.<task>.<provisioner>`, and with
auth on the server lets a provisioner publish only under its own id (docs/decisions/0009). So an
outcome counts only when (1) the body's `provisioner` is the subject's writer, and (2) that
writer claimed the same attempt before: seen by this planner, or (after a restart) found on the
outcome's own subject in the log. Anything else is recorded (the log keeps it) but changes
nothing, and is logged as refused.

The claims seen are also who ran a task's earlier attempts, which its retry avoids (`ran`).
They are kept small, as a job's map of (task, attempt) to one interned name: a 10,000-node
create makes more claims than are kept at the most, and a key of three fresh strings and a set
each, with a list each for the retries' avoid, took four times the memory (docs/benchmarks.md,
"Scale: the planner's CPU a task", session 29).
"""

from __future__ import annotations

import sys

import structlog

from contracts import subjects
from contracts.records import Recorded
from muster.ports.eventlog import EventLog

log = structlog.get_logger("muster.planner")
MAX_REMEMBERED = 100_000
"""Claims kept at most; past it, the oldest half is forgotten (the log answers for them)."""

Holders = str | tuple[str, ...]
"""Who claimed one attempt: nearly always one provisioner (a redelivery may add another)."""


class AttemptHolders:
    def __init__(self, log_: EventLog) -> None:
        self.log = log_
        self.claims: dict[str, dict[tuple[str, int], Holders]] = {}
        """Job id -> (task, attempt) -> the provisioners that claimed it, oldest job first."""
        self._count = 0

    @staticmethod
    def writer(recorded: Recorded) -> str:
        return subjects.task_event_writer(recorded.subject) or str(recorded.event.provisioner)

    def claimed(self, recorded: Recorded) -> bool:
        """Remember who claimed; whether it is the first claim of its attempt seen here (one
        forgotten, `MAX_REMEMBERED`, is seen first again)."""
        event = recorded.event
        if self.writer(recorded) != event.provisioner:
            log.warning("claim refused: body and subject name different provisioners", seq=recorded.seq,
                        body=event.provisioner, subject=recorded.subject)
            return False
        if self._count >= MAX_REMEMBERED:
            self._forget(MAX_REMEMBERED // 2)
        held = self.claims.setdefault(event.job_id, {})
        key, who = (event.task_id, event.attempt), sys.intern(event.provisioner)  # (a few names, each kept once)
        before = held.get(key)
        if before is None:
            held[key] = who
            self._count += 1
            return True
        if who not in self._names(before):
            held[key] = (*self._names(before), who)
        return False

    def holders(self, job_id: str, task_id: str, attempt: int) -> tuple[str, ...]:
        """The provisioners seen claiming the attempt (none if forgotten, or never seen)."""
        found = self.claims.get(job_id, {}).get((task_id, attempt))
        return () if found is None else self._names(found)

    def ran(self, job_id: str, task_id: str, attempt: int) -> list[str]:
        """The provisioners seen claiming the task's attempts before `attempt`, first first
        (best effort: not what a restart or `MAX_REMEMBERED` left out)."""
        out: list[str] = []
        for a in range(1, attempt):
            out += [p for p in self.holders(job_id, task_id, a) if p not in out]
        return out

    @staticmethod
    def _names(found: Holders) -> tuple[str, ...]:
        return (found,) if isinstance(found, str) else found

    def _forget(self, count: int) -> None:
        """The oldest `count` claims: whole jobs first, then the oldest of the next one."""
        for job_id in list(self.claims):
            held = self.claims[job_id]
            if len(held) <= count:
                del self.claims[job_id]
                count -= len(held)
                self._count -= len(held)
            else:
                for key in list(held)[:count]:
                    del held[key]
                self._count -= count
                count = 0
            if count <= 0:
                return

    async def holds(self, recorded: Recorded) -> bool:
        """Did the outcome's writer claim this attempt?"""
        event, writer = recorded.event, self.writer(recorded)
        if writer != event.provisioner:
            log.warning("outcome refused: body and subject name different provisioners", seq=recorded.seq,
                        body=event.provisioner, subject=recorded.subject)
            return False
        if writer in self.holders(event.job_id, event.task_id, event.attempt):
            return True
        earlier = await self.log.read(recorded.subject, up_to_seq=recorded.seq - 1) if recorded.seq > 1 else []
        if any(r.type == "TaskClaimed" and r.event.attempt == event.attempt for r in earlier):
            return True
        log.warning("outcome refused: its provisioner never claimed the attempt", seq=recorded.seq, job=event.job_id,
                    task=event.task_id, attempt=event.attempt, provisioner=writer)
        return False
