"""The job page's live stream: the job's progress coalesced into one batch per interval.

The API's progress stream sends one event per event of the job, each with the job's counts, which
cost a pass over every task; at a few hundred task updates a second (on a job of 110,000 tasks,
at any rate) neither the tracker nor the browser keeps up. The console's stream
(`/ui/jobs/{id}/stream?batch=1`) folds what arrives into the job's fold (kept for a large job:
folds.py), keeps the counts by group and state task by task, and sends at most one `batch` per
`INTERVAL_S`: the latest state of each task that changed (once, however often it changed), the timeline lines,
the running attempts' output lines, the counts by group and for the job, the stage. Its id is
the last log sequence it covers, so a reconnect (`Last-Event-ID`) resumes after it. Nothing
polls: the batch is sent when the interval after its first event ends, or at the job's end.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, deque
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from contracts import subjects
from contracts.events import FENCE_MARKERS, FINAL_JOB_EVENTS, FINAL_JOB_STATES
from contracts.records import Recorded, Undecodable
from muster.bus.bodies import Bodies
from muster.bus.eventstore import inflate, lenient_from_msg
from muster.bus.wire import close_push
from muster.cancels import next_item
from muster.readmodel.locations import parse_subject

from ..app import Tracker, skipped_json
from ..sse import KEEPALIVE_S, sse, stream_response
from ..still import ALWAYS, Still, end_if_lost
from .bigjob import REPLAN, TASK_STEPS, TIMELINE_TAIL, JobFold, line, lines_for
from .folds import JobFolds

INTERVAL_S = 0.25


class Tally:
    """A large job's tasks counted by group and state, moved task by task as they change; counted
    again from the whole status only when the plan or the job's own state changes."""

    def __init__(self, fold: JobFold) -> None:
        self.fold = fold
        self.recount()

    def recount(self) -> None:
        status = self.fold.now()
        self.keys = self.fold.plan()[0]
        self.states = {t["id"]: t["state"] for t in status["tasks"]}
        self.groups: dict[str, Counter[str]] = {}
        for task_id, state in self.states.items():
            self.groups.setdefault(self._key(task_id), Counter())[state] += 1
        self.state, self.error, self.resources = status["state"], status.get("error"), status.get("resources")
        # Once decided: who decided and what they said, for the page that still offers the decision
        # (job.js); its costs are left to a reload, where the page shows them as the viewer may read them.
        asked = status.get("approval")
        self.approval = {k: asked.get(k) for k in ("decision", "by", "comment")} if asked and asked.get("decision") else None

    def _key(self, task_id: str) -> str:
        return self.keys.get(task_id, ("cleanup",))[0]

    def move(self, task_id: str) -> dict[str, Any] | None:
        """The task now (its counts moved from its old state to this one)."""
        t = self.fold.task(task_id)
        if t is None:
            return None
        old, new = self.states.get(task_id), t["state"]
        if old != new:
            counts = self.groups.setdefault(self._key(task_id), Counter())
            if old is not None:
                counts[old] -= 1
            counts[new] += 1
            self.states[task_id] = new
        key, phase, stage = self.keys.get(task_id, ("cleanup", "cleanup", None))
        return {**t, "group": key, "phase": phase, "stage": stage}

    def summary(self) -> dict[str, Any]:
        job = self.fold.job
        rolling = self.state == "rolling_back" and job.rollback_stages is not None
        phase, stages = ("rollback", job.rollback_stages or []) if rolling else ("forward", job.forward_stages)
        current = next((i for i, st in enumerate(stages, 1) if self.groups.get(f"{phase}:{i}", Counter())["succeeded"] < len(st)), None)
        counts: Counter[str] = Counter()
        for c in self.groups.values():
            counts.update(c)
        return {"state": self.state, "error": self.error, "resources": self.resources, "approval": self.approval, "counts": {k: n for k, n in sorted(counts.items()) if n},
                "tasks_total": len(self.states), "stage": {"current": current, "total": len(stages)},
                "groups": {k: {s: n for s, n in sorted(c.items()) if n} for k, c in self.groups.items()}}


class Batch:
    def __init__(self) -> None:
        self.seq = 0
        self.tasks: dict[str, None] = {}
        self.lines: deque[dict[str, Any]] = deque(maxlen=TIMELINE_TAIL)
        self.progress: list[dict[str, Any]] = []
        self.recount = self.replan = False

    def note(self, r: Recorded) -> None:
        self.seq = r.seq
        e = r.event
        parsed = parse_subject(r.subject)
        if e.type == "TaskProgressed":
            self.progress.append({"task_id": e.task_id, "attempt": e.attempt, "n": e.n, "line": e.line, "skipped": e.skipped})
            return
        if e.type not in FENCE_MARKERS:  # the log's, not the story's
            self.lines.append(line(r))
        task_id = getattr(e, "task_id", None)
        if task_id:
            self.tasks[task_id] = None
        if parsed is not None and parsed[1] == "job" and e.type not in TASK_STEPS:
            self.recount = True
            self.replan = self.replan or e.type in REPLAN

    def body(self, tally: Tally, operator: bool = True) -> dict[str, Any]:
        """`operator`: a super admin or a service, who may read a planner's name (bigjob.lines_for)."""
        if self.recount:
            tally.recount()
        tasks = [t for t in map(tally.move, self.tasks) if t is not None]
        return {"seq": self.seq, "tasks": tasks, "lines": lines_for(self.lines, operator), "progress": self.progress, "replan": self.replan,
                **tally.summary()}


@contextlib.asynccontextmanager
async def following(js: JetStreamContext, filters: list[str], after: int) -> AsyncIterator[asyncio.Queue[Msg]]:
    """What the log's `filters` get from just after `after` on, delivered to the queue it gives by
    an ordered consumer (a page's live stream: nothing polls, nothing after what the page shows is
    missed); the consumer closed at the end, the client going away (ConnectionError) ending it quietly."""
    queue: asyncio.Queue[Msg] = asyncio.Queue()
    config = ConsumerConfig(filter_subjects=filters if len(filters) > 1 else None, deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                            opt_start_seq=after + 1)
    sub = await js.subscribe(filters[0], stream=subjects.EVENTS_STREAM, ordered_consumer=True, config=config, cb=queue.put,
                             idle_heartbeat=2.0)
    try:
        yield queue
    except ConnectionError:
        pass  # the client went away
    finally:
        with contextlib.suppress(Exception):
            await close_push(sub)


async def batched(request: web.Request, tracker: Tracker, folds: JobFolds, tenant: str, job_id: str, after: int,
                  operator: bool = True, still: Still = ALWAYS) -> web.StreamResponse:
    fold = await folds.get(tracker, tenant, job_id)
    tally = Tally(fold)
    response = stream_response(request)
    await response.prepare(request)
    js = tracker.nc.jetstream()
    bodies = Bodies(js)
    loop = asyncio.get_running_loop()
    async with following(js, subjects.job_history_filters(tenant, job_id), after) as queue:
        if tally.state in FINAL_JOB_STATES and fold.final is not None and fold.final.seq <= after:  # over before the page was
            await _end(response, tally)
            return response
        batch, deadline = Batch(), None
        while True:
            try:
                msg = await next_item(queue, KEEPALIVE_S if deadline is None else max(0.0, deadline - loop.time()))
            except TimeoutError:
                if deadline is None:
                    await response.write(b": keep-alive\n\n")
                else:
                    await response.write(sse("batch", batch.seq, batch.body(tally, operator)))
                    batch, deadline = Batch(), None
                continue
            if await end_if_lost(response, still):  # asked before each event (still.py)
                return response
            r = await inflate(bodies, lenient_from_msg(msg))
            if isinstance(r.event, Undecodable):  # not an event: named, and read past
                await response.write(sse("skipped", r.seq, skipped_json(r)))
                continue
            fold.add(r)
            batch.note(r)
            deadline = deadline or loop.time() + INTERVAL_S
            if r.type in FINAL_JOB_EVENTS and msg.metadata.num_pending == 0:
                batch.recount = True
                await response.write(sse("batch", batch.seq, batch.body(tally, operator)))
                await _end(response, tally)
                return response
    return response


async def _end(response: web.StreamResponse, tally: Tally) -> None:
    final = tally.fold.final
    summary = tally.summary()
    await response.write(sse("end", final.seq if final else None, {
        "state": summary["state"], "error": summary["error"], "type": final.type if final else None,
        "counts": summary["counts"], "finished_at": final.time.isoformat() if final else None}))
