"""Schedules fired from timers rebuilt from the log (docs/governance.md): no loop polls.

Each schedule has one timer, armed for its next tick from what the log says (its creation, the
last tick taken); the mirror of the schedules (`mirror.py`) re-arms it whenever the schedule's
subject changes. At a tick:

1. `ScheduleFired` is appended fenced on the schedule's last sequence: of two schedulers (or one
   and its restarted self) only one takes a tick; a schedule paused, changed or deleted
   meanwhile refuses it too;
2. the operation's request goes out as the schedule's owner, with a request_id derived from the
   tick: the same request a person would send with the CLI, which the planner admits (and checks
   the owner's grants) as any other; sent twice, it is one job;
3. the answer is recorded (`ScheduleAnswered`: the job, or why it was refused). A refused tick
   whose cluster the log says is deleted ends the schedule in the same event (`ended`): no
   later tick is taken, by this scheduler or any that reads the log after it.

A scheduler that dies between 1 and 3 leaves the tick pending in the log; whichever scheduler
follows the schedule next sends the same request again (same request_id: the same job) and
records the answer. So a tick makes at most one job, across any number of failovers. One tick
is in flight per schedule: no later tick is taken before its request is answered. Ticks missed
while no scheduler ran, or while a tick's request waited for a planner, follow the schedule's
`missed` policy (`domain/schedules.py`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import structlog

from contracts import subjects
from contracts.governance import Schedule, ScheduleAnswered, ScheduleFired
from muster.ports.clock import Cancellable, Clock
from muster.ports.eventlog import Append, ConcurrencyError, EventLog

from .domain.entities import Entry
from .domain.schedules import cluster_gone, cluster_of, due, request_id

log = structlog.get_logger("muster.governance")

class Answer(NamedTuple):
    """What the planner answered a tick's request."""

    job_id: str | None
    rejected: str = ""
    again: bool = False  # nobody answered (or asked to be sent again): send it again later
    done: str = ""  # a request that makes no job (extend-lease): what it did


Send = Callable[[str, str, str, dict[str, Any]], Awaitable[Answer]]
"""(tenant, principal, verb, body) -> (job id, rejection reason, whether to try again later)."""
RESEND_S = (1.0, 2.0, 5.0, 10.0, 30.0)
"""Waits before a tick's request is sent again when no planner could decide on it (or its
answer could not be recorded)."""
RETAKE_S = 5.0
"""Wait before a tick whose `ScheduleFired` the log did not take is tried again."""


class Scheduler:
    def __init__(self, log_: EventLog, send: Send, clock: Clock, instance: str) -> None:
        self.log, self.send, self.clock, self.instance = log_, send, clock, instance
        self.schedules: dict[tuple[str, str], Entry] = {}
        self.timers: dict[tuple[str, str], Cancellable] = {}
        self.sending: set[tuple[str, str, str]] = set()

    def start(self, tenants: dict[str, dict[tuple[str, str], Entry]]) -> None:
        """Every schedule the log holds (the mirror caught up): arm each, and send again the
        requests of ticks taken and not answered."""
        for tenant, entries in tenants.items():
            for (kind, name), entry in list(entries.items()):
                self._changed(tenant, kind, name, entry)

    async def on_change(self, tenant: str, kind: str, name: str, entry: Entry | None) -> None:
        self._changed(tenant, kind, name, entry)

    def _changed(self, tenant: str, kind: str, name: str, entry: Entry | None) -> None:
        """The mirror's watcher: a schedule's subject changed (or the schedule is gone)."""
        if kind != "schedule":
            return
        key = (tenant, name)
        if entry is None:
            self.schedules.pop(key, None)
            self._disarm(key)
            return
        self.schedules[key] = entry
        if entry.pending is not None:
            self._send_later(tenant, name, dict(entry.pending), 0)
        self._arm(key)

    def next_at(self, tenant: str, name: str) -> datetime | None:
        entry = self.schedules.get((tenant, name))
        return due(Schedule.model_validate(entry.entity), entry.last_tick, entry.created_at, self.clock.now(), entry.counts_from).next_at \
            if entry is not None and not entry.ended else None

    def _disarm(self, key: tuple[str, str]) -> None:
        handle = self.timers.pop(key, None)
        if handle is not None:
            handle.cancel()

    def _arm(self, key: tuple[str, str]) -> None:
        entry = self.schedules[key]
        if entry.ended:
            self._disarm(key)
            return
        if entry.pending is not None:
            # One tick in flight per schedule: while its request waits for a planner, no later
            # tick is taken. Its answer re-arms the timer (the mirror), and the ticks that passed
            # meanwhile follow the schedule's `missed` policy, as if no scheduler had run.
            self._disarm(key)
            return
        schedule = Schedule.model_validate(entry.entity)
        decision = due(schedule, entry.last_tick, entry.created_at, self.clock.now(), entry.counts_from)
        self._disarm(key)
        at = self.clock.now() if decision.tick is not None else decision.next_at
        self.timers[key] = self.clock.call_at(at, lambda: self._tick(*key))

    async def _tick(self, tenant: str, name: str) -> None:
        key = (tenant, name)
        self.timers.pop(key, None)
        entry = self.schedules.get(key)
        if entry is None or entry.ended:
            return
        schedule = Schedule.model_validate(entry.entity)
        decision = due(schedule, entry.last_tick, entry.created_at, self.clock.now(), entry.counts_from)
        if decision.tick is None:
            self._arm(key)
            return
        rid = request_id(name, decision.tick)
        fired = ScheduleFired(name=name, tick=decision.tick, request_id=rid, scheduler=self.instance,
                              late_s=round(decision.late_s, 3), skipped=decision.skipped)
        subject = subjects.governance_events(tenant, "schedule", name)
        try:
            await self.log.append(subject, [Append(fired, msg_id=f"{subject}:fired:{rid}:{self.instance}")],
                                  expect_last_seq=entry.seq)
        except ConcurrencyError:
            log.info("tick taken elsewhere or schedule changed", tenant=tenant, schedule=name, tick=decision.tick.isoformat())
            return  # the mirror brings what changed, and re-arms
        except Exception as err:  # noqa: BLE001 - the log away (a partition, an election): take the tick again soon
            # Its timer was spent: without a new one the schedule never fired again (session 32).
            # Taken again, it is fenced as before: if this append landed after all, the mirror
            # brings it and the retry is refused as taken.
            log.warning("tick not taken: the log did not answer; trying again", tenant=tenant, schedule=name,
                        tick=decision.tick.isoformat(), error=f"{type(err).__name__}: {err}"[:200], again_in_s=RETAKE_S)
            self.timers[key] = self.clock.call_at(self.clock.now() + timedelta(seconds=RETAKE_S), lambda: self._tick(*key))
            return
        log.info("schedule fired", tenant=tenant, schedule=name, tick=decision.tick.isoformat(), late_s=fired.late_s,
                 skipped=fired.skipped)
        self._send_later(tenant, name, {"tick": decision.tick.isoformat(), "request_id": rid}, 0)

    def _send_later(self, tenant: str, name: str, pending: dict[str, Any], tries: int) -> None:
        """Send a taken tick's request (now, or after a wait when tried before); one at a time per tick."""
        key = (tenant, name, str(pending["request_id"]))
        if tries == 0 and key in self.sending:
            return
        self.sending.add(key)
        delay = RESEND_S[min(tries - 1, len(RESEND_S) - 1)] if tries else 0.0
        self.clock.call_at(self.clock.now() + timedelta(seconds=delay), lambda: self._deliver(tenant, name, pending, tries))

    async def _deliver(self, tenant: str, name: str, pending: dict[str, Any], tries: int) -> None:
        """Send a taken tick's request and record the answer (or send it again later)."""
        key = (tenant, name, str(pending["request_id"]))
        entry = self.schedules.get((tenant, name))
        if entry is None or any(r["tick"] == pending["tick"] for r in entry.runs):
            self.sending.discard(key)
            return  # deleted since, or answered already (a replay of the log)
        schedule = Schedule.model_validate(entry.entity)
        body = {**schedule.command, "request_id": pending["request_id"], "requested_by": schedule.owner}
        try:
            job_id, rejected, again, done = await self.send(tenant, schedule.owner, schedule.verb, body)
        except Exception as err:  # noqa: BLE001 - the bus away: sent again, as when no planner answers
            job_id, rejected, again, done = None, f"the request could not be sent ({type(err).__name__}: {err})"[:300], True, ""
        if again and tries < len(RESEND_S) * 2:
            self._send_later(tenant, name, pending, tries + 1)
            return
        tick = datetime.fromisoformat(str(pending["tick"]))
        subject = subjects.governance_events(tenant, "schedule", name)
        try:
            ended = await self._ended(tenant, schedule) if job_id is None and not done else ""
            ran = ScheduleAnswered(name=name, tick=tick, job_id=job_id, rejected=rejected[:1000], done=done, ended=ended[:500])
            await self.log.append(subject, [Append(ran, msg_id=f"{subject}:ran:{pending['request_id']}")])
        except Exception as err:  # noqa: BLE001 - the log away: the tick stays in flight and is answered again later
            # (before session 32 it stayed in flight for good: no later tick until a restart)
            log.warning("tick's answer not recorded; sending it again later", tenant=tenant, schedule=name,
                        error=f"{type(err).__name__}: {err}"[:200])
            self._send_later(tenant, name, pending, tries + 1)  # the same request_id: the same job
            return
        self.sending.discard(key)
        log.info("schedule ran", tenant=tenant, schedule=name, job=job_id, rejected=rejected[:200], ended=ended)

    async def _ended(self, tenant: str, schedule: Schedule) -> str:
        """Why a refused tick ends its schedule ('' : the schedule goes on), from the log: its
        cluster was deleted. Asked of the log, not read from the refusal's words, and only once
        refused, so a tick that runs reads nothing more."""
        cluster_id = cluster_of(schedule)
        if cluster_id is None:
            return ""
        try:
            return cluster_gone(await self.log.read(subjects.cluster_events(tenant, cluster_id)))
        except subjects.SubjectError:
            return ""  # not a cluster id: the planner refused it for that, and says so

    def close(self) -> None:
        for handle in self.timers.values():
            handle.cancel()
        self.timers.clear()
