"""Only the provisioner that holds a task's attempt may record its outcome.

A claim and an outcome are written on `muster.evt.<t>.task.<job>.<task>.<provisioner>`, and with
auth on the server lets a provisioner publish only under its own id (docs/decisions/0009). So an
outcome counts only when (1) the body's `provisioner` is the subject's writer, and (2) that
writer claimed the same attempt before: seen by this planner, or (after a restart) found on the
outcome's own subject in the log. Anything else is recorded (the log keeps it) but changes
nothing, and is logged as refused.
"""

from __future__ import annotations

import structlog

from contracts import subjects
from contracts.records import Recorded
from muster.ports.eventlog import EventLog

log = structlog.get_logger("muster.planner")
MAX_REMEMBERED = 100_000


class AttemptHolders:
    def __init__(self, log_: EventLog) -> None:
        self.log = log_
        self.claims: dict[tuple[str, str, int], set[str]] = {}

    @staticmethod
    def writer(recorded: Recorded) -> str:
        return subjects.task_event_writer(recorded.subject) or str(recorded.event.provisioner)

    def claimed(self, recorded: Recorded) -> None:
        event = recorded.event
        if self.writer(recorded) != event.provisioner:
            log.warning("claim refused: body and subject name different provisioners", seq=recorded.seq,
                        body=event.provisioner, subject=recorded.subject)
            return
        if len(self.claims) >= MAX_REMEMBERED:  # forget the oldest half; the log answers for them
            for key in list(self.claims)[: MAX_REMEMBERED // 2]:
                del self.claims[key]
        self.claims.setdefault((event.job_id, event.task_id, event.attempt), set()).add(event.provisioner)

    async def holds(self, recorded: Recorded) -> bool:
        """Did the outcome's writer claim this attempt?"""
        event, writer = recorded.event, self.writer(recorded)
        if writer != event.provisioner:
            log.warning("outcome refused: body and subject name different provisioners", seq=recorded.seq,
                        body=event.provisioner, subject=recorded.subject)
            return False
        if writer in self.claims.get((event.job_id, event.task_id, event.attempt), ()):
            return True
        earlier = await self.log.read(recorded.subject, up_to_seq=recorded.seq - 1) if recorded.seq > 1 else []
        if any(r.type == "TaskClaimed" and r.event.attempt == event.attempt for r in earlier):
            return True
        log.warning("outcome refused: its provisioner never claimed the attempt", seq=recorded.seq, job=event.job_id,
                    task=event.task_id, attempt=event.attempt, provisioner=writer)
        return False
