"""What the segment fault scenarios share (tests/fault/test_segment_restarts*.py): the job's
segments as the log tells them, the services' structured log lines, and the checks each makes
of nats-server's log and the task queue after the job (docs/decisions/0058)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from contracts import subjects
from contracts.catalog import Action, Catalog
from contracts.events import TaskQueued
from muster.bus.eventstore import EventStore, Recorded

from .harness import FaultStack, demo_catalog
from .invariants import Report

T = "default"
SLOW_START_MS = "1500"
"""A service start's time: the provisioner killed at the claim of one surely dies while it runs."""
TERMINATED = f"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.{subjects.TASKS_STREAM}.>"

GIVEN_BACK = "segment's outcomes not read; will be redelivered"
TAKEN_UP = "segment taken up after its finished steps"
ENDED_STALE = "segment no longer current; ended unrun"


def catalog(**fields: str) -> Catalog:
    return demo_catalog(latency_ms="20-80", latency_ms_start=SLOW_START_MS, **fields)


class Segments:
    """The job's segments as the log tells them, read in order (a `FaultStack.follow` predicate):
    each task's latest `TaskQueued`, and the first claim of a follower whose action is a start."""

    def __init__(self) -> None:
        self.queued: dict[str, TaskQueued] = {}
        self.seq: dict[str, int] = {}

    def follower_start_claimed(self, events: list[Recorded]) -> bool:
        r = events[-1]
        if r.type == "TaskQueued":
            self.queued[r.event.task_id], self.seq[r.event.task_id] = r.event, r.seq
            return False
        q = self.queued.get(r.event.task_id) if r.type == "TaskClaimed" else None
        return q is not None and q.attempt == r.event.attempt and q.after is not None and q.action == Action.START

    def head(self, task_id: str) -> str:
        """The first step of `task_id`'s segment (the task its message goes under)."""
        while (before := self.queued[task_id].after) is not None:
            task_id = before
        return task_id


def process(provisioner_id: str) -> str:
    return f"provisioner-{provisioner_id.removeprefix('prov-')}"


def said(fs: FaultStack, process: str, what: str) -> list[dict[str, Any]]:
    """The structured lines of a service's log whose event is `what`, in order."""
    out = []
    for line in (fs.deployment.data_dir / "logs" / f"{process}.log").read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("event") == what:
            out.append(record)
    return out


def no_violations_on_steps(fs: FaultStack) -> None:
    """nats-server logged no permission violation on a steps subject (the ask, or its answer)."""
    assert fs.server is not None and fs.server.log_path is not None
    violations = [line for line in fs.server.log_path.read_text(errors="replace").splitlines()
                  if "violation" in line.lower() and ".steps" in line]
    assert violations == [], violations


async def story(fs: FaultStack, job: str) -> list[Recorded]:
    return await EventStore(fs.conn).read_many(subjects.job_history_filters(T, job))


def runs(story: list[Recorded]) -> tuple[dict[str, list[tuple[str, int, int]]], dict[str, list[tuple[str, int]]]]:
    """Per task: its claims (provisioner, attempt, delivery) and its provisioners' outcomes
    (provisioner, attempt), in log order."""
    claims: dict[str, list[tuple[str, int, int]]] = {}
    outcomes: dict[str, list[tuple[str, int]]] = {}
    for r in story:
        if r.type == "TaskClaimed":
            claims.setdefault(r.event.task_id, []).append((r.event.provisioner, r.event.attempt, r.event.delivery))
        elif r.type in ("TaskSucceeded", "TaskFailed"):
            outcomes.setdefault(r.event.task_id, []).append((r.event.provisioner, r.event.attempt))
    return claims, outcomes


LAST_DELIVERY_S = 45.0
"""How long a delivery the killed provisioner also held may take to come back and be ended: its
own ack wait (30 s) from when it was delivered, a little after the one the scenario follows."""


async def queue_empty(fs: FaultStack) -> None:
    """No task message is left in the queue: every segment's delivery was settled for good. The
    kill may have caught its provisioner holding another delivery (a step just claimed): that
    one comes back at its own ack wait and is ended (terminated) too, so the queue is looked at
    again at each termination, until it is empty or `LAST_DELIVERY_S` passed (test-long met it
    still waiting, delivered a few ms after the scenario's own)."""
    ended: asyncio.Queue[None] = asyncio.Queue()

    async def on_ended(_msg: Any) -> None:
        ended.put_nowait(None)

    sub = await fs.conn.subscribe(TERMINATED, cb=on_ended)
    try:
        deadline = asyncio.get_running_loop().time() + LAST_DELIVERY_S
        while (left := (await fs.conn.jetstream().stream_info(subjects.TASKS_STREAM)).state.messages) > 0:
            try:  # (the next termination, then look again)
                await asyncio.wait_for(ended.get(), max(deadline - asyncio.get_running_loop().time(), 0.0))
            except TimeoutError:
                break
        assert left == 0, f"{left} task messages left in the queue"
    finally:
        await sub.unsubscribe()



async def settled(fs: FaultStack, summary: str) -> Report:
    """What every scenario ends with: no permission violation on `.steps`, no task message left,
    its summary printed, and the invariants over the whole log (the report for its own checks)."""
    no_violations_on_steps(fs)
    await queue_empty(fs)
    print(f"\n{summary}")
    report = await fs.check()
    report.assert_ok()
    return report
