"""The log's records: an event as it sits in the log (`Recorded`), one to append (`Append`),
and the names of the headers its metadata travels in. Pure (stdlib only): read models, the
aggregates' repository and unit tests use these without a NATS client.

The event store port (`muster.ports.eventlog`) and its JetStream adapter
(`muster.bus.eventstore`, which re-exports these names) are built on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from .events import Event

H_TYPE = "Muster-Type"
H_AGGREGATE = "Muster-Aggregate"
H_VERSION = "Muster-Version"
H_TIME = "Muster-Time"
H_MSG_ID = "Nats-Msg-Id"
H_EXPECT = "Nats-Expected-Last-Subject-Sequence"


@dataclass(frozen=True)
class Recorded:
    """One event as it sits in the log."""

    seq: int
    subject: str
    time: datetime
    event: Any
    aggregate_id: str | None = None
    version: int | None = None

    @property
    def type(self) -> str:
        return str(self.event.type)


@dataclass(frozen=True)
class Append:
    """One event to append, with what the log needs to know about it."""

    event: Event
    msg_id: str
    aggregate_id: str | None = None
    version: int | None = None
    time: datetime | None = None

    def headers(self) -> dict[str, str]:
        h = {H_TYPE: str(getattr(self.event, "type")), H_MSG_ID: self.msg_id}
        if self.aggregate_id is not None:
            h[H_AGGREGATE] = self.aggregate_id
        if self.version is not None:
            h[H_VERSION] = str(self.version)
        h[H_TIME] = (self.time or datetime.now(timezone.utc)).isoformat()
        return h
