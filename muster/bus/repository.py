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
from collections.abc import Iterable
from functools import lru_cache
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.domain import BaseAggregate, CanInitAggregate
from eventsourcing.utils import get_topic

from ..ports.eventlog import Append, EventLog, Recorded

A = TypeVar("A", bound=BaseAggregate[Any])

SEQ_ATTR = "_log_seq"
"""Where an aggregate remembers the log sequence of its last stored event: the token of
optimistic concurrency for its next save. Not part of the aggregate's state."""


def log_seq(aggregate: BaseAggregate[Any]) -> int:
    return int(getattr(aggregate, SEQ_ATTR, 0))


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
    """One step of a rebuild: apply one recorded event."""
    aggregate = to_domain_event(cls, recorded).mutate(aggregate)
    setattr(aggregate, SEQ_ATTR, recorded.seq)
    return aggregate


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


def pending_appends(aggregate: BaseAggregate[Any]) -> list[Append]:
    return [
        Append(
            event=e.payload,  # type: ignore[attr-defined]
            msg_id=_msg_id(e),
            aggregate_id=str(e.originator_id),
            version=e.originator_version,
            time=e.timestamp,
        )
        for e in aggregate.collect_events()
    ]


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
        seqs = await self.store.append(subject, appends, expect_last_seq=log_seq(aggregate))
        setattr(aggregate, SEQ_ATTR, seqs[-1])
