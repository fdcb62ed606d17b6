"""In-memory fakes of the ports, for unit tests of service layers (no broker, no wall time).

They keep the guarantees the service layers rely on, as the JetStream adapters do:
`MemoryEventLog` refuses a stale writer (expected last sequence per subject), stores a retried
append once (idempotency keys), and lands a multi-event append whole or not at all;
`MemoryTaskQueue` de-duplicates attempts by message id. Faults can be injected (an append
refused, an append that lands but whose ack is lost, a log that cannot be read, a publish that
fails) to test repairs.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from contracts.subjects import fence_subject
from contracts.tasks import TaskMessage
from muster import tracing

from .budgets import BudgetConflict, Stored
from .clock import Call
from .eventlog import Append, ConcurrencyError, Head, Recorded, StepEnded
from .taskqueue import task_msg_id


def matches(subject_filter: str, subject: str) -> bool:
    """NATS subject matching: `*` is one token, a final `>` one or more."""
    want, have = subject_filter.split("."), subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have) or (token != "*" and token != have[i]):
            return False
    return len(want) == len(have)


@dataclass
class _Fault:
    when: Callable[[str, Sequence[Append]], bool]
    error: BaseException
    lands: bool
    times: int


class MemoryEventLog:
    """The event log port in memory (see `muster.ports.eventlog` for the contract)."""

    def __init__(self, clock: ManualClock | None = None) -> None:
        self.records: list[Recorded] = []
        self._ids: dict[str, int] = {}  # idempotency key -> sequence
        self._id_of: dict[int, str] = {}
        self._last: dict[str, int] = {}  # subject -> last sequence
        self._faults: list[_Fault] = []
        self._clock = clock
        self.unreadable: BaseException | None = None
        self._step_ended: set[str] = set()
        """Keys of submitted step-fenced messages whose step was closed: the claims that follow
        them are refused (`submit`, as `LogWriter._sort_refusal` decides)."""
        """Raised by every read while set (a stream electing a leader, a partition)."""

    def inject(self, when: Callable[[str, Sequence[Append]], bool], error: BaseException, *,
               lands: bool = False, times: int = 1) -> None:
        """The next `times` appends for which `when` holds raise `error`; with `lands`, after
        being stored (an ack lost on the way back)."""
        self._faults.append(_Fault(when, error, lands, times))

    def _fault(self, subject: str, items: Sequence[Append]) -> _Fault | None:
        for fault in self._faults:
            if fault.times > 0 and fault.when(subject, items):
                fault.times -= 1
                return fault
        return None

    async def append(self, subject: str, items: Sequence[Append], expect_last_seq: int | None = None) -> list[int]:
        if not items:
            return []
        fault = self._fault(subject, items)
        if fault is not None and not fault.lands:
            raise fault.error
        seqs = self._store(subject, items, expect_last_seq)
        if fault is not None:
            raise fault.error
        return seqs

    async def append_fenced(self, entries: Sequence[tuple[str, Append]], expect_last_seq: int,
                            subject_filter: str, more: Sequence[tuple[int, int, str]] = ()) -> list[int]:
        fault = self._fault(entries[0][0], [item for _, item in entries])
        if fault is not None and not fault.lands:
            raise fault.error
        for at, expect, on in [(0, expect_last_seq, subject_filter), *more]:
            if any(matches(on, subject) for subject, _ in entries[:at]):
                raise ValueError(f"{on}: an entry before {at} is on a subject it fences")
            last = max((r.seq for r in self.records if matches(on, r.subject)), default=0)
            if last > expect:
                raise ConcurrencyError(f"{on}: wrong last sequence: {last}")
        if any(item.msg_id in self._ids for _, item in entries):
            raise ConcurrencyError(f"{subject_filter}: an idempotency key stored before")
        seqs: list[int] = []
        for subject, item in entries:
            seqs += self._store(subject, [item], None)
        if fault is not None:
            raise fault.error
        return seqs

    def submit(self, subject: str, item: Append, *, now: bool = False) -> asyncio.Future[int]:
        stored: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        fault = self._fault(subject, [item])
        if fault is not None and not fault.lands:
            stored.set_exception(fault.error)
            return stored
        if item.follows is not None and item.follows in self._step_ended:
            stored.set_exception(StepEnded(f"{subject}: the step it follows is closed"))
            return stored
        if item.step_fence is not None and self._last.get(item.step_fence):
            # Its step is closed: its claim (submitted next) is refused; a marker is not stored,
            # an outcome is, without the check (docs/decisions/0058, 0059).
            self._step_ended.add(item.msg_id)
            if item.marker:
                stored.set_exception(StepEnded(f"{subject}: {item.step_fence} is closed"))
                return stored
        try:
            [seq] = self._store(subject, [item], None)
        except ConcurrencyError as err:  # its fence is closed (`Append.only_if_empty`)
            stored.set_exception(err)
            return stored
        if fault is not None:
            stored.set_exception(fault.error)
        else:
            stored.set_result(seq)
        return stored

    async def append_chain(self, parts: Sequence[tuple[str, Sequence[Append], int | None]]) -> list[list[int]]:
        out: list[list[int]] = []
        for subject, items, expect in parts:
            seqs: list[int] = []
            for item in items:  # one at a time, each fenced on the one before
                fence = (seqs[-1] if seqs else expect) if expect is not None else None
                seqs += await self.append(subject, [item], fence)
            out.append(seqs)
        return out

    def _store(self, subject: str, items: Sequence[Append], expect_last_seq: int | None) -> list[int]:
        last = self._last.get(subject, 0)
        fenced_on = self._last.get(fence_subject(subject), 0)  # a job's task records: the job's
        stale = expect_last_seq is not None and fenced_on != expect_last_seq
        closed = [item.only_if_empty for item in items if item.only_if_empty is not None and self._last.get(item.only_if_empty)]
        stale = stale or bool(closed)
        seen = [item.msg_id in self._ids for item in items]
        if stale or (len(items) > 1 and any(seen)):
            # As the server: the expected sequence is checked before de-duplication, so a
            # retry of an append that landed is told apart by the subject's last key.
            if last and self._id_of.get(last) == items[-1].msg_id:
                return list(range(last - len(items) + 1, last + 1))
            raise ConcurrencyError(f"{subject}: wrong last sequence: {fenced_on}")
        if len(items) == 1 and seen[0]:
            return [self._ids[items[0].msg_id]]
        now = self._clock.now() if self._clock is not None else datetime.now(UTC)
        seqs = []
        for item in items:
            seq = len(self.records) + 1
            self.records.append(Recorded(seq=seq, subject=subject, time=item.time or now, event=item.event,
                                         aggregate_id=item.aggregate_id, version=item.version,
                                         trace=item.trace if item.trace is not None else tracing.current()))
            self._ids[item.msg_id], self._id_of[seq] = seq, item.msg_id
            seqs.append(seq)
        self._last[subject] = seqs[-1]
        return seqs

    def _readable(self) -> None:
        if self.unreadable is not None:
            raise self.unreadable

    async def last_seq(self, subject: str) -> int:
        self._readable()
        return self._last.get(subject, 0)

    async def read(self, subject_filter: str, start_seq: int = 1, up_to_seq: int | None = None) -> list[Recorded]:
        self._readable()
        end = len(self.records) if up_to_seq is None else min(up_to_seq, len(self.records))
        return [r for r in self.records[max(0, start_seq - 1):end] if matches(subject_filter, r.subject)]

    async def read_through(self, subject: str, seq: int) -> list[Recorded]:
        return await self.read(subject, up_to_seq=seq)

    async def read_heads(self, subject_filter: str, start_seq: int = 1, up_to_seq: int | None = None) -> list[Head]:
        self._readable()
        end = len(self.records) if up_to_seq is None else min(up_to_seq, len(self.records))
        return [Head(r.seq, r.subject, r.type, self._id_of.get(r.seq)) for r in self.records[max(0, start_seq - 1):end]
                if matches(subject_filter, r.subject)]

    async def read_many(self, subject_filters: Sequence[str], up_to_seq: int | None = None) -> list[Recorded]:
        self._readable()
        end = len(self.records) if up_to_seq is None else up_to_seq
        return [r for r in self.records[:end] if any(matches(f, r.subject) for f in subject_filters)]

    async def replay(self, subject_filter: str | Sequence[str], on_event: Callable[[Recorded], None], timeout: float = 600.0,
                     *, start_seq: int = 1, bodies: bool = True) -> int:
        self._readable()
        filters = [subject_filter] if isinstance(subject_filter, str) else list(subject_filter)
        found = [r for r in self.records[max(0, start_seq - 1):] if any(matches(f, r.subject) for f in filters)]
        for r in found:
            on_event(r)
        return len(found)

    async def subjects(self, subject_filter: str) -> dict[str, int]:
        self._readable()
        out: dict[str, int] = {}
        for r in self.records:
            if matches(subject_filter, r.subject):
                out[r.subject] = out.get(r.subject, 0) + 1
        return out

    async def subject_names(self, subject_filter: str) -> set[str]:
        return set(await self.subjects(subject_filter))

    def types(self, subject_filter: str = ">") -> list[str]:
        """The types of the matching events, in log order (for assertions)."""
        return [r.type for r in self.records if matches(subject_filter, r.subject)]


class MemoryTaskQueue:
    """The task queue port in memory: every attempt once, in publish order."""

    def __init__(self) -> None:
        self.messages: list[TaskMessage] = []
        self.taken = 0  # how many of `messages` a consumer has taken
        self.published = 0  # publishes, de-duplicated ones too
        self.traces: dict[str, str] = {}
        """Each attempt's trace context, as a header would carry it (`task_msg_id` -> traceparent)."""
        self._ids: set[str] = set()
        self._failures: list[tuple[Callable[[TaskMessage], bool], BaseException]] = []

    def fail(self, when: Callable[[TaskMessage], bool], error: BaseException, times: int = 1) -> None:
        """The next `times` publishes for which `when` holds raise `error` (nothing queued)."""
        self._failures += [(when, error)] * times

    async def publish(self, message: TaskMessage) -> None:
        for i, (when, error) in enumerate(self._failures):
            if when(message):
                del self._failures[i]
                raise error
        self.published += 1
        key = task_msg_id(message)
        if key not in self._ids:
            self._ids.add(key)
            self.messages.append(message)

    async def publish_many(self, messages: Sequence[TaskMessage], *,
                           traces: Sequence[str | None] | None = None) -> list[BaseException | None]:
        failures: list[BaseException | None] = []
        for i, message in enumerate(messages):
            try:
                await self.publish(message)
                failures.append(None)
                if traces is not None and traces[i] is not None:
                    self.traces.setdefault(task_msg_id(message), traces[i])  # type: ignore[arg-type]
            except Exception as err:  # noqa: BLE001 - reported per message, as the port says
                failures.append(err)
        return failures

    def take(self) -> list[TaskMessage]:
        """What was queued since the last take, as a consumer would receive it."""
        new, self.taken = self.messages[self.taken:], len(self.messages)
        return new


class _Handle:
    def __init__(self, clock: ManualClock, key: int) -> None:
        self._clock, self._key = clock, key

    def cancel(self) -> None:
        self._clock._cancelled.add(self._key)


class ManualClock:
    """A clock that moves only when told: `await clock.advance(seconds)` runs every call that
    falls due, in time order, each to completion."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime.now(UTC)
        self._due: list[tuple[datetime, int, Call]] = []
        self._cancelled: set[int] = set()
        self._seq = itertools.count()

    def now(self) -> datetime:
        return self._now

    def call_at(self, when: datetime, call: Call) -> _Handle:
        key = next(self._seq)
        heapq.heappush(self._due, (when, key, call))
        return _Handle(self, key)

    @property
    def pending(self) -> int:
        return sum(1 for _, key, _ in self._due if key not in self._cancelled)

    async def advance(self, seconds: float) -> None:
        end = self._now + timedelta(seconds=seconds)
        while self._due and self._due[0][0] <= end:
            when, key, call = heapq.heappop(self._due)
            if key in self._cancelled:
                self._cancelled.discard(key)
                continue
            self._now = max(self._now, when)
            await call()
        self._now = end


class MemoryBudgets:
    """The budgets port in memory, shared by the planners of a test. Each change is noted for
    every planner but its writer (`changes`); the test delivers them, as the watch would."""

    def __init__(self) -> None:
        self.values: dict[str, Stored] = {}
        self.revision = 0
        self.changes: dict[str, list[str]] = {}
        """watcher -> names changed since it last looked."""
        self.fail: BaseException | None = None

    def view(self, watcher: str) -> MemoryBudgetsView:
        self.changes.setdefault(watcher, [])
        return MemoryBudgetsView(self, watcher)


class MemoryBudgetsView:
    """One planner's handle on `MemoryBudgets`."""

    def __init__(self, shared: MemoryBudgets, watcher: str) -> None:
        self.shared, self.watcher = shared, watcher

    def known(self) -> dict[str, Stored]:
        return self.shared.values

    async def read(self, name: str) -> Stored:
        return self.shared.values.get(name) or Stored()

    async def write(self, name: str, shares: Mapping[int, int], revision: int) -> int:
        shared = self.shared
        if shared.fail is not None:
            raise shared.fail
        if (shared.values.get(name) or Stored()).revision != revision:
            raise BudgetConflict(f"budget {name} is not at revision {revision}")
        shared.revision += 1
        shared.values[name] = Stored(dict(shares), shared.revision)
        for watcher, changed in shared.changes.items():
            if watcher != self.watcher:
                changed.append(name)
        return shared.revision


class MemorySpend:
    """The planners' spend board in memory (`services.planner.ports.SpendBoard`), shared by the
    planners of a test; a write is seen by every one at once, as a watch would deliver it."""

    def __init__(self) -> None:
        self.values: dict[str, dict[str, Any]] = {}
        self.revisions: dict[str, int] = {}
        self.fail: BaseException | None = None
        self.writes = 0
        self.conditional = 0
        """Reservations asked for (`put_if`)."""
        self.before_put_if: Callable[[], Awaitable[None]] | None = None
        """Run inside `put_if` before its check (tests: another planner's write in that moment)."""
        self.held_back: BaseException | None = None
        """Raised by plain writes only (tests: a planner's background write that has not landed
        yet, while its fenced ones do)."""

    def known(self) -> dict[str, dict[str, Any]]:
        return self.values

    async def put(self, name: str, spend: Mapping[str, Any]) -> None:
        if self.fail is not None:
            raise self.fail
        if self.held_back is not None:
            raise self.held_back
        self._store(name, spend)

    def _store(self, name: str, spend: Mapping[str, Any]) -> None:
        self.writes += 1
        self.values[name], self.revisions[name] = dict(spend), self.writes

    def revision(self, tenant: str) -> int:
        return max((r for k, r in self.revisions.items() if k.rpartition(".")[0] == tenant), default=0)

    async def put_if(self, name: str, spend: Mapping[str, Any], tenant: str, last: int) -> int | None:
        if self.before_put_if is not None:
            await self.before_put_if()
        self.conditional += 1
        if self.fail is not None:
            raise self.fail
        if self.revision(tenant) != last:
            return self.revision(tenant)
        self._store(name, spend)
        return None

    async def caught_up(self, tenant: str, last: int, timeout: float) -> None:
        return None  # (every write is seen at once)
