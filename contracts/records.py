"""The envelope of an event in the log: the headers that travel with the body, and an event
as it sits in the log (`Recorded`) or is about to be appended (`Append`).

Pure (no NATS import), so read models, ports and their in-memory fakes can use these types
without a connection; `muster.bus.eventstore` is the adapter that moves them over JetStream.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .events import EVENT_TYPES, Event, parse_event

H_TYPE = "Muster-Type"
H_AGGREGATE = "Muster-Aggregate"
H_VERSION = "Muster-Version"
H_TIME = "Muster-Time"
H_MSG_ID = "Nats-Msg-Id"
H_EXPECT = "Nats-Expected-Last-Subject-Sequence"
H_TRACE = "traceparent"
"""W3C trace context of the span that appended the event (docs/tracing.md); absent when off."""
H_WRITER = "Muster-Writer"
"""Which process appended the event (a planner's instance name): the log itself then shows
which planner acted for a cluster when, so fencing is checked from it (tests/fault)."""


@dataclass(frozen=True)
class Recorded:
    """One event as it sits in the log."""

    seq: int
    subject: str
    time: datetime
    event: Any
    aggregate_id: str | None = None
    version: int | None = None
    trace: str | None = None
    """The `traceparent` it was appended under, if any (`muster.tracing`)."""

    @property
    def type(self) -> str:
        return str(self.event.type)


@dataclass(frozen=True)
class Head:
    """An event as a headers-only read gives it (`EventLog.read_heads`): where it is, its type
    and idempotency key, its body never decoded (a reader that needs only which events there
    are: a cancel's close reads a job's claims this way, docs/decisions/0046)."""

    seq: int
    subject: str
    type: str
    msg_id: str | None = None


@dataclass(frozen=True)
class Append:
    """One event to append, with what the log needs to know about it."""

    event: Event
    msg_id: str
    aggregate_id: str | None = None
    version: int | None = None
    time: datetime | None = None
    trace: str | None = None
    """A `traceparent` to append it under; the log's writer puts the current span's there when
    none is given (`muster.bus.appends`)."""
    writer: str | None = None
    """Who appends it (`H_WRITER`), when the store names its writer."""
    only_if_empty: str | None = None
    """Appended only while nothing is stored on this subject (a claim, on its job's cancel fence:
    docs/decisions/0046); else the log refuses it (`ConcurrencyError`)."""
    lane: str | None = None
    """Sent with the claims on this fence (a segment step's outcome beside its next step's claim,
    one store), expecting nothing itself; refused with them by the fence, it goes alone
    (docs/decisions/0058)."""
    step_fence: str | None = None
    """A segment step's outcome sent with the next step's claim (`lane`): stored only while
    nothing is stored on this subject (the next step's `StepClosed`: the planner ended it unrun);
    else it goes alone, expecting nothing, and the claim that `follows` it is refused
    (`StepEnded`, docs/decisions/0058)."""
    follows: str | None = None
    """The claim of a segment's next step: the idempotency key of the outcome it goes with; refused
    when that outcome's `step_fence` refuses it. Or the key of its claim's marker (`marker`)."""
    marker: bool = False
    """A claim's marker (`StepOpened`, with `step_fence` and `lane`): it carries the step fence
    for a claim with no step outcome before it (docs/decisions/0059); refused by that fence it
    is not stored at all, where an outcome is stored alone."""
    returns: bool = False
    """A segment step's claim: its plugin's outcome comes back to the same lane (`lane`), which
    waits a few turns of the loop for it after storing the claim (`LANE_GATHER_TURNS`,
    docs/decisions/0050)."""

    def headers(self) -> dict[str, str]:
        h = {H_TYPE: str(getattr(self.event, "type")), H_MSG_ID: self.msg_id}  # noqa: B009 - only Event's subclasses declare `type`
        if self.aggregate_id is not None:
            h[H_AGGREGATE] = self.aggregate_id
        if self.version is not None:
            h[H_VERSION] = str(self.version)
        h[H_TIME] = (self.time or datetime.now(UTC)).isoformat()
        if self.writer:
            h[H_WRITER] = self.writer
        if (empty := self.only_if_empty or self.step_fence) is not None:  # (one expectation a message)
            h[H_EXPECT], h[H_EXPECT + "-Subject"] = "0", empty
        if self.trace is not None:  # last: readers find the three before it in this order
            h[H_TRACE] = self.trace
        return h


UNDECODABLE = "Undecodable"


@dataclass(frozen=True)
class Undecodable:
    """What a lenient reader (the tracker's) gets in place of a stored message that is not a
    valid event (a body another client published on a log subject): named by its record's
    seq and subject, with why, so a read goes on past it rather than failing for good. No fold
    knows the type, so each skips it."""

    reason: str
    type: str = UNDECODABLE


def recorded(subject: str, seq: int, data: bytes, headers: dict[str, str]) -> Recorded:
    """Decode a stored message (body and headers) into a Recorded event."""
    time_text = headers.get(H_TIME) or headers.get("Nats-Time-Stamp")
    time = datetime.fromisoformat(time_text) if time_text else datetime.fromtimestamp(0, UTC)
    version = headers.get(H_VERSION)
    model = EVENT_TYPES.get(headers.get(H_TYPE, ""))
    return Recorded(
        seq=seq,
        subject=subject,
        time=time,
        # The type header names the model: validating against it alone is cheaper than the
        # discriminated union, and the body's own `type` literal still has to agree.
        event=model.model_validate_json(data) if model is not None else parse_event(data),
        aggregate_id=headers.get(H_AGGREGATE),
        version=int(version) if version else None,
        trace=headers.get(H_TRACE),
    )
