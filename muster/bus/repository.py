"""Event-sourced aggregates (eventsourcing's domain layer) stored in the log.

An aggregate's events are declared with `@event("<ContractType>")` on methods taking one
argument, `payload`, a contract event. So the nested domain event class is named after the
contract type, and decoding a message needs no registry: `getattr(AggregateClass, event.type)`.
The message body is the contract's JSON alone (readable by any client); the aggregate id,
version and time travel in headers.

No NATS here: a Repository works on any `muster.ports.eventlog.EventLog` (the JetStream store or
the in-memory fake).
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Iterable, Sequence
from functools import cache, lru_cache
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.domain import (
    BaseAggregate,
    CanInitAggregate,
    DecoratedFuncCaller,
    OriginatorIDError,
    OriginatorVersionError,
    decorated_funcs,
)
from eventsourcing.utils import get_topic

from contracts.events import FENCE_MARKERS
from contracts.subjects import fence_subject

from ..ports.eventlog import Append, ConcurrencyError, EventLog, Recorded

A = TypeVar("A", bound=BaseAggregate[Any])

SEQ_ATTR = "_log_seq"
"""Where an aggregate remembers the log sequence of its last stored event: the token of
optimistic concurrency for its next save. Not part of the aggregate's state."""


STORED_ATTR = "_log_version"
"""The aggregate's version when its last stored event was stored (or folded): its next save
must begin right after it."""


FENCE_ATTR = "_fence_seq"
"""The last sequence of the subject its appends are fenced on, where that is not `SEQ_ATTR`: a
job's task records have a subject of their own, fenced on the job's (docs/decisions/0033)."""



def log_seq(aggregate: BaseAggregate[Any]) -> int:
    return int(getattr(aggregate, SEQ_ATTR, 0))


def fence_seq(aggregate: BaseAggregate[Any]) -> int:
    return int(getattr(aggregate, FENCE_ATTR, None) or log_seq(aggregate))


def mark_stored(aggregate: BaseAggregate[Any], seq: int, version: int | None = None, fence: int | None = None) -> None:
    """The aggregate's events up to `version` (default: all) are in the log, the last at `seq`;
    the last on the subject they are fenced on at `fence` (default: `seq`)."""
    setattr(aggregate, SEQ_ATTR, seq)
    setattr(aggregate, STORED_ATTR, aggregate.version if version is None else version)
    if fence is not None or FENCE_ATTR in vars(aggregate):
        setattr(aggregate, FENCE_ATTR, seq if fence is None else fence)


def fence(aggregate: BaseAggregate[Any], subject: str, appends: Sequence[Append]) -> int:
    """The expected last sequence of `subject` for appending `appends`, the aggregate's next
    events. Refused (ConcurrencyError) when they do not begin right after its last stored
    event: a save that failed, or whose answer was lost (a server failover), has taken its
    events out of the aggregate but not into the log; fenced on the old sequence, the next
    save would land and leave a hole in the versions that no fold gets past. The owner must
    take the log's view again (found by the loopback cluster's leader-kill test)."""
    seq = log_seq(aggregate)
    stored = getattr(aggregate, STORED_ATTR, None if seq else 0)  # None: an old snapshot, not known
    first = appends[0].version if appends else None
    if stored is not None and first is not None and first != stored + 1:
        raise ConcurrencyError(f"{subject}: version {first} would follow version {stored}; "
                               f"versions {stored + 1}..{first - 1} were never stored: take the log's view again")
    return fence_seq(aggregate)


@lru_cache(maxsize=65536)
def _uuid(text: str) -> UUID:
    return UUID(text)


def to_domain_event(cls: type[A], recorded: Recorded) -> Any:
    payload = recorded.event
    event_cls = getattr(cls, payload.type)
    kwargs: dict[str, Any] = dict(
        originator_id=_uuid(recorded.aggregate_id) if recorded.aggregate_id else None,
        originator_version=recorded.version,
        timestamp=recorded.time,
        payload=payload,
    )
    if issubclass(event_cls, CanInitAggregate):
        kwargs["originator_topic"] = get_topic(cls)
    return event_cls(**kwargs)


def fold(cls: type[A], aggregate: A | None, recorded: Recorded) -> A:
    """One step of a rebuild: apply one recorded event.

    An event that changes an existing aggregate goes straight to the method its `@event`
    decorated, after the checks and updates eventsourcing's `mutate` makes (same aggregate,
    next version; version and modified_on set after): building the library's domain event
    for it, only to take the payload back out, cost many times the method itself in a full
    fold (docs/decisions/0005-log-reads-from-the-wire.md). The payload is the contract
    event decoded once from the message; nothing is validated again. Creation events, and any
    event class without a plain `(self, payload)` method, take the library's path. A marker
    (`FENCE_MARKERS`) and any event on a subject fenced on another (a job's task records) move only
    the sequences the next append is fenced with."""
    if recorded.type in FENCE_MARKERS:  # (not the aggregate's: it takes only their sequence)
        if aggregate is not None:
            mark_stored(aggregate, recorded.seq, fence=recorded.seq)
        return aggregate  # type: ignore[return-value]  # (a log never begins with one)
    apply = _applier(cls, recorded.event.type) if aggregate is not None else None
    if apply is None:
        aggregate = to_domain_event(cls, recorded).mutate(aggregate)
    else:
        assert aggregate is not None
        originator = _uuid(recorded.aggregate_id) if recorded.aggregate_id else None
        if originator is not aggregate.id and originator != aggregate.id:  # `is`: the same cached UUID
            raise OriginatorIDError(originator, aggregate.id)
        next_version = aggregate.version + 1
        if recorded.version != next_version:
            raise OriginatorVersionError(recorded.version, next_version)
        apply(aggregate, recorded.event)
        aggregate.version = next_version
        aggregate.modified_on = recorded.time
    if recorded.subject != fence_subject(recorded.subject):
        mark_stored(aggregate, recorded.seq, fence=fence_seq(aggregate))
    else:
        mark_stored(aggregate, recorded.seq)
    return aggregate


@cache
def _applier(cls: type[BaseAggregate[Any]], event_type: str) -> Callable[[Any, Any], None] | None:
    """The function an aggregate's `@event(event_type)` decorated, when it is a plain
    `(self, payload)` method of a non-creation event; None otherwise (the library's path)."""
    event_cls = getattr(cls, event_type, None)
    if event_cls is None or not isinstance(event_cls, type) or issubclass(event_cls, CanInitAggregate):
        return None
    if not issubclass(event_cls, DecoratedFuncCaller) or event_cls.apply is not DecoratedFuncCaller.apply:
        return None
    func = decorated_funcs.get(event_cls)
    if func is None or list(inspect.signature(func).parameters) != ["self", "payload"]:
        return None
    return func


def rebuild(cls: type[A], history: Iterable[Recorded]) -> A | None:
    """Fold an aggregate's recorded events; None if there are none."""
    aggregate: A | None = None
    for recorded in history:
        aggregate = fold(cls, aggregate, recorded)
    return aggregate


def _msg_id(e: Any) -> str:
    # Aggregate + version alone would make a second writer's different event at the same
    # version look like a retry of the first; the digest tells a retry (same bytes) apart.
    digest = hashlib.sha256(e.payload.model_dump_json().encode() + e.timestamp.isoformat().encode()).hexdigest()[:16]
    return f"{e.originator_id}:{e.originator_version}:{digest}"


def append_of(e: Any) -> Append:
    """The append of one collected domain event."""
    return Append(event=e.payload, msg_id=_msg_id(e), aggregate_id=str(e.originator_id), version=e.originator_version,
                  time=e.timestamp)


def pending_appends(aggregate: BaseAggregate[Any]) -> list[Append]:
    return [append_of(e) for e in aggregate.collect_events()]


class Repository:
    def __init__(self, store: EventLog) -> None:
        self.store = store

    async def load(self, cls: type[A], subject: str) -> A | None:
        return rebuild(cls, await self.store.read(subject))

    async def save(self, aggregate: BaseAggregate[Any], subject: str) -> None:
        """Append the aggregate's new events, refused (ConcurrencyError) if anyone else
        appended to its subject since it was loaded."""
        appends = pending_appends(aggregate)
        if not appends:
            return
        seqs = await self.store.append(subject, appends, expect_last_seq=fence(aggregate, subject, appends))
        mark_stored(aggregate, seqs[-1])

    async def save_chain(self, pairs: Sequence[tuple[BaseAggregate[Any], str]]) -> None:
        """Several aggregates' new events in order, each event appended as if alone right after
        the one before (`EventLog.append_chain`): one round trip, and where a refusal stops it
        a prefix is stored. Only for events each of which is a whole decision."""
        pending = [(aggregate, subject, pending_appends(aggregate)) for aggregate, subject in pairs]
        pending = [p for p in pending if p[2]]
        if not pending:
            return
        stored = await self.store.append_chain([(subject, appends, fence(a, subject, appends)) for a, subject, appends in pending])
        for (aggregate, _, _), seqs in zip(pending, stored, strict=True):
            mark_stored(aggregate, seqs[-1])
