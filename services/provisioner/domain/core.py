"""The provisioner's worker as a state machine: inputs in, actions out; no IO, no clock.

A task delivery takes a numbered *slot* (`capacity + claim_ahead` of them) and its claim goes
to the log; once the claim is stored it takes a *plugin slot* (`capacity`), at once or in turn
in the *waiting line*; when its plugin returns, its slot is free and its outcome goes to the
log; once that is stored the delivery is acked. The tasks beyond `capacity` are *claimed ahead*
(decision 12): one more is allowed per plugin that returned within `SHORT_RUN_S`, none after a
slower one or after a task claimed ahead found no plugin slot within `AHEAD_WAIT_S` (it goes
back to the queue). Every held delivery gets keep-alives (in progress) every third of its
queue's ack wait, until it is answered.

A worker with a *lease* (`leased`: its provisioner keeps a presence record, and the lease is
the time that record is sure to be there, `services/provisioner/lease.py`) runs a forward
attempt (one with a cancel fence) only in the lease's term (`epoch`) its claim was sent in,
and stops it when that term lapses (`lease_lapsed`): a planner may then count the attempt lost
and have its rollback undo it (docs/decisions/0054). Rollback tasks (no fence) run on.

Inputs: `queue_declared`, `delivered`, `claimed`, `ran`, `stored`, `drain`, `lease_renewed`,
`lease_lapsed`, `promise` (a
planner that found the task queue lost was told what is held: held deliveries are then this
worker's to finish, and a failure takes them up again here rather than giving them back to a
queue that lost them), `due` (the time came for the next deadline, `next_due`). Each returns the actions to carry out, in order:
`Claim`, `Run`, `Stop`, `Store` (an outcome), `Answer` (ack, nak with delay, term, in progress) and
`Note` (something to log). The adapter (`services/provisioner/worker.py`) feeds the answers of
the log, the plugins and the clock back in.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from contracts import subjects
from contracts.events import StepOpened, TaskClaimed, TaskFailed, TaskSucceeded
from contracts.records import Append
from contracts.tasks import TaskMessage, TaskOutcome, TaskStep
from muster.ports.delivery import ACK, PROGRESS, TERM, Settle, nak

from .actions import (
    Action,
    Answer,
    Claim,
    Note,
    Read,
    Run,
    Stop,
    Store,
    StoreStep,
    WorkerConfig,
    attempt_key,
    lets_go,
    outcome_event,
)

FINISHING_PER_SLOT = 4
"""Outcomes being stored (their plugins done, their slots free) per plugin slot beyond which the
pulls ask for nothing (the log is slow, or down)."""
RETRY_DELAY_S = 1.0
"""Redelivery delay of a task whose claim or outcome the log did not take, or whose plugin crashed."""
SHORT_RUN_S = 1.0
"""A plugin that returns within this lets the worker claim one more task ahead."""
AHEAD_WAIT_S = 1.0
"""A task claimed ahead that finds no plugin slot within this goes back to the queue."""


class Slots:
    """Numbered places for the tasks held (the worker numbers in `TaskClaimed`); the lowest
    free number is taken first."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._free = list(range(capacity))  # a heap

    @property
    def busy(self) -> int:
        return self.capacity - len(self._free)

    def take(self) -> int | None:
        return heapq.heappop(self._free) if self._free else None

    def give(self, slot: int) -> None:
        heapq.heappush(self._free, slot)


Stage = Literal["reading", "claiming", "waiting", "running", "storing", "again"]


@dataclass(slots=True)
class Held:
    """One delivery held, from its arrival until it is answered."""

    reply: str
    task: TaskMessage
    slot: int
    worker: str
    subject: str
    every: float
    keepalive_at: float
    stage: Stage = "claiming"
    line_until: float = 0.0
    ok: bool = False
    delivery: int = 1
    promised: bool = False
    """A planner that found the task queue lost was told this provisioner holds it, and sent it
    again only if not (`promise`): the queue it came from is gone, so a failure takes it up
    again here instead of giving it back to nobody (docs/decisions/0013)."""
    again_at: float = 0.0
    outcome: Append | None = None
    promised_until: float = 0.0
    """Taken up again here only until then (the action's time limit from the promise): a plugin
    that keeps crashing, or a log that keeps refusing, is not retried every second for ever; the
    planner's attempt timeout then decides, as for any delivery given back."""
    term: int = -1
    """The lease's term its last claim was sent in (-1: sent while the lease had lapsed)."""
    rest: list[TaskStep] = field(default_factory=list)
    """A segment's steps after `task`, each run once the one before succeeded (docs/decisions/0058),
    as the message said them: each becomes a message of its own when it is next (`fold`)."""
    segment: bool = False
    step: tuple[str, Append] | None = None
    """The outcome of the step before (its subject, its append) that went with the claim on its
    way: the two are one store, so a claim taken up again here goes with it again (were the
    claim alone stored, the step's outcome would be lost and its planner would wait the step's
    whole timeout for it)."""
    opened: bool = False
    """Its last claim went with a marker (`StepOpened`), not with the step before's outcome."""


@dataclass
class WorkerCore:
    config: WorkerConfig
    completed: int = 0
    passed: int = 0
    """Deliveries let go: `avoid`, no slot free, draining, or claimed ahead without a plugin slot."""
    cancelled: int = 0
    """Deliveries whose claim the job's cancel fence refused (`_cancelled`): never run."""
    ended: int = 0
    """Segments stopped because the planner had ended their next step unrun (`_step_ended`)."""
    draining: bool = False
    held: dict[int, Held] = field(default_factory=dict)
    leased: bool = False
    """Forward attempts run only within their claim's lease term (set by a provisioner that keeps
    a presence record; a bare worker, in tests and benchmarks, has no lease)."""
    lease_ok: bool = False
    epoch: int = 0
    """The lease's term: one more at every lapse."""
    stopped: int = 0
    """Plugins stopped, or forward attempts not started, because the lease lapsed."""

    def __post_init__(self) -> None:
        self.capacity = self.config.capacity
        self.ahead = self.capacity if self.config.claim_ahead is None else max(self.config.claim_ahead, 0)
        self.slots = Slots(self.capacity + self.ahead)
        self.ahead_ok = 0
        """Tasks that may be held beyond capacity now."""
        self.running = 0
        """Plugins running (at most `capacity`)."""
        self.finishing = 0
        """Outcomes being stored."""
        self.line: deque[int] = deque()
        """Claimed tasks waiting for a plugin slot, first come first served."""
        self._keepalive_s: dict[str, float] = {}
        self._ids = itertools.count()
        self._due: list[tuple[float, int, str, int]] = []  # (when, tie, "keepalive" | "line", held id)
        self._tie = itertools.count()

    # -- what the adapter asks ---------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Tasks held in slots: claimed (or being claimed) and not yet returned by their plugin."""
        return self.slots.busy

    @property
    def idle(self) -> bool:
        return not self.held

    @property
    def holding(self) -> set[str]:
        """The attempts held (`<job>.<task>.<attempt>`), from taking the task until its outcome is
        stored or it goes back to the queue (docs/decisions/0013)."""
        return {attempt_key(h.task) for h in self.held.values()}

    def promise(self, now: float = 0.0) -> set[str]:
        """`holding`, told to a planner that found the task queue lost: each of these is this
        provisioner's to finish from now on, within its action's time limit (`Held.promised`)."""
        for h in self.held.values():
            if not h.promised:
                h.promised, h.promised_until = True, now + h.task.timeout_s
        return self.holding

    def wanted(self) -> int:
        """How many tasks the pulls may ask for now."""
        if self.draining or self.finishing >= FINISHING_PER_SLOT * self.capacity:
            return 0
        return max(self.capacity + self.ahead_ok - self.slots.busy, 0)

    def next_due(self) -> float | None:
        """When `due` must be called next (None: nothing to wait for)."""
        while self._due and not self._alive(self._due[0]):
            heapq.heappop(self._due)
        return self._due[0][0] if self._due else None

    # -- inputs --------------------------------------------------------------------------------

    def queue_declared(self, tenant: str, ack_wait_s: float) -> None:
        """The tenant's queue redelivers after `ack_wait_s` (another provisioner may have set it)."""
        self._keepalive_s[tenant] = max(min(ack_wait_s, self.config.ack_wait_s) / 3, 0.05)

    def delivered(self, tenant: str, reply: str, data: bytes, delivery: int, now: float) -> list[Action]:
        slot = None if self.draining or self.capacity + self.ahead_ok - self.slots.busy <= 0 else self.slots.take()
        if slot is None:
            # Draining, or two queues answered at once beyond capacity: back to the queue now,
            # for a provisioner that has room.
            self.passed += 1
            return [Answer(reply, nak())]
        try:
            task = TaskMessage.model_validate_json(data)
        except ValidationError as err:
            self.slots.give(slot)
            return [Note("error", "undecodable task terminated", {"error": str(err)[:500]}), Answer(reply, TERM)]
        if task.tenant != tenant:
            # The tenant decides which secrets the task sees (domain/secrets.py): it is the queue's,
            # whose writers the bus authorizes, never only what the message says.
            self.slots.give(slot)
            return [Note("error", "task of another tenant's queue terminated", {"task": task.task_id, "queue": tenant,
                                                                               "says": task.tenant}), Answer(reply, TERM)]
        rest: list[TaskStep] = []
        if task.then:
            rest, task = list(task.then), task.model_copy(update={"then": []})
        if lets_go(task, self.config.provisioner_id, delivery, self.config):
            self.slots.give(slot)
            self.passed += 1
            return [Note("info", "task let go for another provisioner", {"task": task.task_id, "attempt": task.attempt,
                                                                         "delivery": delivery}),
                    Answer(reply, nak(self.config.avoid_delay_s))]
        if not self._may_claim(task):  # (its claim could never run: no claim, no event in the log)
            self.slots.give(slot)
            self.passed += 1
            return [Answer(reply, nak(RETRY_DELAY_S))]
        me = self.config.provisioner_id
        worker = f"{me}/w{slot}"
        subject = subjects.task_events(task.tenant, task.job_id, task.task_id, me)  # only this provisioner writes there
        every = self._keepalive_s.get(tenant, 1.0)
        hid = next(self._ids)
        self.held[hid] = Held(reply, task, slot, worker, subject, every, now + every, delivery=delivery, rest=rest,
                              segment=task.segment is not None or bool(rest))
        self._at(now + every, "keepalive", hid)
        if task.segment is not None and (delivery > 1 or task.again):
            # A segment delivered again (its provisioner lost, its lease lapsed, its delivery
            # given back) or sent again by its planner: some steps may have run, and none runs
            # twice (docs/decisions/0058).
            self.held[hid].stage = "reading"
            return [Read(hid, (task, *rest))]
        return [self._claim(hid)]

    def read(self, hid: int, found: list[TaskSucceeded | TaskFailed], now: float,
             error: BaseException | None = None, stale: str = "") -> list[Action]:
        """What the log holds of a segment delivered again: `found`, the outcomes of its steps'
        attempts in order, up to the first step without one. It starts after the last success,
        with what those steps returned folded in as if it had run them; a stored failure ended
        it (the planner takes that failure), and so did its last step's outcome. `stale`: the
        planner says the steps are no longer the job's current segment (an attempt of one was
        queued again since): ended, nothing run, as the planner has moved on."""
        h = self.held.get(hid)
        if h is None:
            return []
        if error is not None:
            return self._give_back(hid, "segment's outcomes not read; will be redelivered", error, now=now)
        if stale:
            return self._ended(hid, Note("warning", "segment no longer current; ended unrun",
                                         {"job": h.task.job_id, "task": h.task.task_id, "why": stale}), TERM)
        steps: list[TaskStep] = [h.task, *h.rest]
        done, current = 0, h.task
        for event, step in zip(found, steps, strict=False):
            if (event.task_id, event.attempt) != (step.task_id, step.attempt):
                break  # (not this step's attempt: the reader's mistake, taken as nothing found)
            if isinstance(event, TaskFailed):
                return self._finished(hid, "segment already ended by a failed step", step, done + 1)
            done += 1
            if done < len(steps):
                current = fold(steps[done], current, event.result, event.ipaddresses, event.hostname)
        if done == len(steps):
            return self._finished(hid, "segment already ran to its end", steps[-1], done)
        h.task, h.rest = current, steps[done + 1:]
        h.subject = subjects.task_events(h.task.tenant, h.task.job_id, h.task.task_id, self.config.provisioner_id)
        h.stage = "claiming"
        out: list[Action] = []
        if done:
            out.append(Note("info", "segment taken up after its finished steps",
                            {"job": h.task.job_id, "task": h.task.task_id, "skipped": done}))
        return [*out, self._claim(hid)]

    def _finished(self, hid: int, what: str, step: TaskStep, steps: int) -> list[Action]:
        """A segment delivered again whose outcomes are all stored: nothing runs, it is acked."""
        return self._ended(hid, Note("info", what, {"job": step.job_id, "task": step.task_id, "steps": steps}), ACK)

    def _ended(self, hid: int, note: Note, verdict: Settle) -> list[Action]:
        """A segment delivered again that runs nothing: its slot free, its delivery settled."""
        h = self.held.pop(hid)
        self.slots.give(h.slot)
        self.passed += 1
        return [note, Answer(h.reply, verdict)]

    def _claim(self, hid: int, after: Append | None = None) -> Claim:
        """`after`: the outcome of the step before, which this claim goes with (in its lane),
        fenced on this step's end. Without one (a lone task, a segment's head, a segment taken
        up after its finished steps) the claim goes with a marker that carries that fence
        (`StepOpened`): a message carries one expectation, and the claim's is its cancel fence.
        So no attempt the planner has ended (timed out, ended unrun) is claimed after its end
        (docs/decisions/0059). Refused, the claim fails `StepEnded` (`_step_ended`)."""
        h = self.held[hid]
        h.term = self.epoch if self.lease_ok else -1
        task = h.task
        me = self.config.provisioner_id
        claim = TaskClaimed(job_id=task.job_id, task_id=task.task_id, attempt=task.attempt, provisioner=me,
                            worker=h.worker, delivery=h.delivery)
        key = f"{attempt_key(task)}.claim.{h.delivery}"
        h.opened = after is None
        if after is not None:
            append = Append(claim, msg_id=key, only_if_empty=task.fence, follows=after.msg_id,
                            lane=None if task.fence is not None else after.lane, returns=True)
            return Claim(hid, h.subject, append)
        closed = subjects.step_closed(task.tenant, task.job_id, task.task_id, task.attempt)
        opened = StepOpened(job_id=task.job_id, task_id=task.task_id, attempt=task.attempt, provisioner=me,
                            delivery=h.delivery)
        # In the claim's lane (its cancel fence's; a rollback's: its step's subject), just before it.
        marker = Append(opened, msg_id=f"{attempt_key(task)}.open.{h.delivery}", lane=task.fence or closed,
                        step_fence=closed, marker=True)
        append = Append(claim, msg_id=key, only_if_empty=task.fence, follows=marker.msg_id,
                        lane=None if task.fence is not None else closed, returns=h.segment)
        opens = subjects.step_opened(task.tenant, task.job_id, task.task_id, task.attempt, me)
        return Claim(hid, h.subject, append, (opens, marker))

    def claimed(self, hid: int, now: float, error: BaseException | None = None, closed: bool = False,
                ended: bool = False) -> list[Action]:
        """The claim is stored (or the log refused it: the task comes back later; `closed`: the
        log refused it because the task's fence is closed, and it never comes back; `ended`: the
        planner ended this step unrun, so the segment stops here)."""
        h = self.held.get(hid)
        if h is None:
            return []
        if error is not None and ended:
            return self._step_ended(hid, first=h.opened)
        if error is not None and closed and h.task.fence is not None:
            return self._cancelled(hid)
        if error is not None:
            return self._give_back(hid, "task handling failed; will be redelivered", error, now=now)
        h.step = None  # (stored with the claim)
        if not self._in_term(h):
            self.stopped += 1
            return self._give_back(hid, "task not run: the provisioner's lease lapsed since its claim was sent", None, now=now)
        if self.running < self.capacity and not self.line:
            self.running += 1
            h.stage = "running"
            return [Run(hid, h.task)]
        h.stage, h.line_until = "waiting", now + AHEAD_WAIT_S
        self.line.append(hid)
        self._at(h.line_until, "line", hid)
        return []

    def ran(self, hid: int, outcome: TaskOutcome | None, seconds: float, error: BaseException | None = None,
            now: float = 0.0) -> list[Action]:
        """The plugin returned `outcome` after `seconds` (or crashed with `error`)."""
        self.ahead_ok = min(self.ahead_ok + 1, self.ahead) if seconds < SHORT_RUN_S else 0
        after = self._next_in_line(now)
        h = self.held.get(hid)
        if h is None:
            return after
        if error is not None or outcome is None:
            return self._give_back(hid, "task handling failed; will be redelivered", error, now=now) + after
        event = outcome_event(h.task, outcome, self.config.provisioner_id, h.worker)
        lane = h.task.fence if h.segment else None
        if outcome.ok and h.rest:
            # The next step's claim goes with this outcome, one store: the claim is still stored
            # before its plugin starts (decision 50), and the planner is not asked in between.
            # The outcome is stored with it only while the planner has not ended that next step
            # (its `StepClosed`: this step failed on a copy, or timed out), so a late copy of the
            # segment stops here (docs/decisions/0058). A segment with no cancel fence (a
            # rollback's) goes in a lane of that subject's, so the two are still one store.
            nxt = h.rest.pop(0)
            closed = subjects.step_closed(h.task.tenant, h.task.job_id, nxt.task_id, nxt.attempt)
            step = Append(event, msg_id=f"{attempt_key(h.task)}.outcome", lane=lane or closed, step_fence=closed)
            done_subject = h.subject
            h.task = fold(nxt, h.task, outcome.result, outcome.ipaddresses, outcome.hostname)
            h.subject = subjects.task_events(h.task.tenant, h.task.job_id, h.task.task_id, self.config.provisioner_id)
            h.stage, h.step = "claiming", (done_subject, step)
            return [StoreStep(hid, done_subject, step), self._claim(hid, after=step), *after]
        self.slots.give(h.slot)
        h.stage, h.ok = "storing", outcome.ok
        self.finishing += 1
        h.outcome = Append(event, msg_id=f"{attempt_key(h.task)}.outcome", lane=lane)
        return [Store(hid, h.subject, h.outcome), *after]

    def stored(self, hid: int, error: BaseException | None = None, now: float = 0.0) -> list[Action]:
        """The outcome is stored (one per attempt: its key): ack. Or the log failed us: the task
        comes back and runs again (a promised one: the same outcome is stored again here)."""
        h = self.held.get(hid)
        if h is None:
            return []
        if error is not None and h.promised and now < h.promised_until:
            h.again_at = now + RETRY_DELAY_S
            self._at(h.again_at, "store", hid)
            return [Note("error", "outcome not recorded; stored again here (the task queue it came from was lost)",
                         {"task": h.task.task_id, "error": str(error) or type(error).__name__})]
        del self.held[hid]
        self.finishing -= 1
        if error is not None:
            return [Note("error", "outcome not recorded; will be redelivered",
                         {"task": h.task.task_id, "error": str(error) or type(error).__name__}),
                    Answer(h.reply, nak(RETRY_DELAY_S))]
        self.completed += 1
        task = h.task
        return [Note("info", "task finished", {"job": task.job_id, "task": task.task_id, "attempt": task.attempt,
                                               "worker": h.worker, "ok": h.ok}),
                Answer(h.reply, ACK)]

    def drain(self) -> None:
        """Take no new tasks; those held go on."""
        self.draining = True

    def lease_renewed(self) -> None:
        """The lease holds (again): claims sent from now on are of the current term."""
        self.lease_ok = True

    def lease_lapsed(self, now: float) -> list[Action]:
        """The lease's term ended (the presence record could not be renewed in time, so a planner
        may already count this provisioner gone, docs/decisions/0054): every forward attempt
        running is stopped and given back, those waiting for a slot too, and nothing claimed
        in that term runs any more, even if the lease is renewed later."""
        if not self.leased:
            return []
        self.epoch += 1
        self.lease_ok = False
        self.ahead_ok = 0
        out: list[Action] = []
        for hid, h in list(self.held.items()):
            if self.held.get(hid) is not h or h.task.fence is None or h.stage not in ("running", "waiting"):
                continue  # (one in line may have been let go already, as the next of a stopped one)
            self.stopped += 1
            if h.stage == "running":
                out.append(Stop(hid))
                out += self._give_back(hid, "task stopped: the provisioner's lease lapsed", None, now=now)
                out += self._next_in_line(now)
            else:
                self.line.remove(hid)
                out += self._give_back(hid, "task not run: the provisioner's lease lapsed", None, now=now)
        return out

    def due(self, now: float) -> list[Action]:
        """Keep-alives whose time came, and tasks claimed ahead that waited too long for a slot."""
        out: list[Action] = []
        while self._due and self._due[0][0] <= now:
            entry = heapq.heappop(self._due)
            if not self._alive(entry):
                continue
            _, _, kind, hid = entry
            h = self.held[hid]
            if kind == "again" and not self._may_claim(h.task):
                h.again_at = now + RETRY_DELAY_S  # (not claimed while the lease has lapsed)
                self._at(h.again_at, "again", hid)
            elif kind == "again":
                h.delivery += 1  # as a redelivery's claim: its own key
                h.stage = "claiming"
                if h.step is not None:  # (its step's outcome, not stored either: the pair again)
                    out += [StoreStep(hid, *h.step), self._claim(hid, after=h.step[1])]
                else:
                    out.append(self._claim(hid))
            elif kind == "store":
                assert h.outcome is not None
                out.append(Store(hid, h.subject, h.outcome))
            elif kind == "keepalive":
                h.keepalive_at = now + h.every
                self._at(h.keepalive_at, "keepalive", hid)
                out.append(Answer(h.reply, PROGRESS))
            elif not h.promised:  # (a promised one waits its turn: it has no queue to go back to)
                self.line.remove(hid)
                self.ahead_ok = 0  # the slots turn over slowly: claim no more ahead
                self.passed += 1
                out += self._give_back(hid, "task claimed ahead let go: no free slot", None, delay=0.0, now=now)
        return out

    # -- inside ----------------------------------------------------------------------------------

    def _give_back(self, hid: int, what: str, error: BaseException | None, delay: float = RETRY_DELAY_S,
                   now: float = 0.0) -> list[Action]:
        """The delivery goes back to the queue (its claim, if stored, stays in the log, as a dead
        worker's does). A promised one has no queue to go back to: it keeps its slot and is
        claimed again here after the delay, as a redelivery would be."""
        h = self.held[hid]
        if h.promised and now < h.promised_until:
            h.stage, h.again_at = "again", now + max(delay, RETRY_DELAY_S)
            self._at(h.again_at, "again", hid)
            said: dict[str, Any] = {"task": h.task.task_id, "attempt": h.task.attempt}
            if error is not None:
                said["error"] = str(error) or type(error).__name__
            return [Note("error" if error is not None else "info",
                         f"{what.split(';')[0]}; taken up again here (the task queue it came from was lost)", said)]
        del self.held[hid]
        if h.stage != "storing":
            self.slots.give(h.slot)
        fields: dict[str, Any] = {"task": h.task.task_id, "attempt": h.task.attempt}
        if error is not None:
            fields["error"] = str(error) or type(error).__name__
        return [Note("error" if error is not None else "info", what, fields), Answer(h.reply, nak(delay))]

    def _cancelled(self, hid: int) -> list[Action]:
        """The claim was refused by its fence: the job was cancelled before this attempt was
        claimed, and its planner ended the attempt (docs/decisions/0046). Never run; out of the
        queue for good (a redelivery would be refused the same way)."""
        h = self.held.pop(hid)
        self.slots.give(h.slot)
        self.cancelled += 1
        task = h.task
        return [Note("info", "task not run: its job was cancelled before it was claimed",
                     {"job": task.job_id, "task": task.task_id, "attempt": task.attempt}), Answer(h.reply, TERM)]

    def _step_ended(self, hid: int, first: bool = False) -> list[Action]:
        """The planner ended this step unrun before its claim (the step before failed on another
        copy of the segment, or timed out: docs/decisions/0058), so neither it nor the steps
        after it run here; the step before's outcome is stored (a late result). `first`: no
        step ran here, the planner ended the attempt itself (it timed out while its message
        waited: docs/decisions/0059). Out of the queue for good: its planner has moved on (the
        retry, if any, is a message of its own)."""
        h = self.held.pop(hid)
        self.slots.give(h.slot)
        self.ended += 1
        task = h.task
        what = ("task not run: the planner ended its attempt before it was claimed" if first
                else "segment stopped: the planner ended its next step before it was claimed")
        return [Note("info", what, {"job": task.job_id, "task": task.task_id, "attempt": task.attempt, "left": len(h.rest)}),
                Answer(h.reply, TERM)]

    def _next_in_line(self, now: float = 0.0) -> list[Action]:
        """A plugin slot came free: the next task in line takes it, or it stays free."""
        out: list[Action] = []
        while self.line:
            hid = self.line.popleft()
            h = self.held[hid]
            if not self._in_term(h):  # (claimed in a term that lapsed since)
                self.stopped += 1
                out += self._give_back(hid, "task not run: the provisioner's lease lapsed since its claim was sent", None, now=now)
                continue
            h.stage = "running"
            return [*out, Run(hid, h.task)]
        self.running -= 1
        return out

    def _may_claim(self, task: TaskMessage) -> bool:
        """A forward attempt is not claimed while the lease has lapsed: it could not run."""
        return not self.leased or task.fence is None or self.lease_ok

    def _in_term(self, h: Held) -> bool:
        """Whether the task may start now: a rollback's always; a forward attempt only within the
        lease term its claim was sent in (a planner may count a claim of a lapsed term lost)."""
        return not self.leased or h.task.fence is None or (self.lease_ok and h.term == self.epoch)

    def _at(self, when: float, kind: str, hid: int) -> None:
        heapq.heappush(self._due, (when, next(self._tie), kind, hid))

    def _alive(self, entry: tuple[float, int, str, int]) -> bool:
        when, _, kind, hid = entry
        h = self.held.get(hid)
        if h is None:
            return False
        if kind == "keepalive":
            return h.keepalive_at == when
        if kind == "again":
            return h.stage == "again" and h.again_at == when
        if kind == "store":
            return h.stage == "storing" and h.again_at == when
        return h.stage == "waiting" and h.line_until == when


def fold(step: TaskStep, before: TaskMessage, results: dict[str, Any], ipaddresses: dict[str, str],
         hostname: str) -> TaskMessage:
    """The next step of a segment as the planner would have sent it after `before` succeeded
    (returning these): the node's results so far, and its addresses and host name, the newest
    any step returned.

    Built as a copy of `before` with every field of the step's given, and none of a segment's:
    one copy a step, and not `model_construct`, which fills a field left out with its default
    factory only after reading the factory's signature (`inspect.signature(list)`, parsed from
    text at each call): that was most of what segments once cost a provisioner more
    (docs/benchmarks.md, "Scale: segments", session 28)."""
    node = step.node
    addresses = ipaddresses or before.node.ipaddresses or node.ipaddresses
    name = hostname or before.node.hostname or node.hostname
    if (addresses, name) != (node.ipaddresses, node.hostname):
        node = node.model_copy(update={"ipaddresses": addresses, "hostname": name})
    return before.model_copy(update={**vars(step), "then": [], "segment": None, "again": False,
                                     "results": {**before.results, **results}, "node": node})
