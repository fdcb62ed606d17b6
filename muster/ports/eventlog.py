"""The event log port: what a service may ask of the log, and what comes back.

No NATS here: the records themselves (`Recorded`, `Append`) are `contracts.records`, re-exported
here. The JetStream adapter is `muster.bus.eventstore.EventStore`; the
in-memory fake is `muster.ports.memory.MemoryEventLog`. Both honour the same contract:

- `append(subject, items, expect_last_seq)`: all items land on `subject` in order, or none do.
  With `expect_last_seq` (0 = the subject must be empty) a writer whose view is stale gets
  `ConcurrencyError`, never a merge. Every item carries an idempotency key (`msg_id`): a retry
  of an append that did land returns the first append's sequences and stores nothing new.
- `append_chain([(subject, items, expect_last_seq), ...])`: the same events as those appends
  made one event at a time in order, each fenced on the one before it on its subject, stopping
  at the first refusal (so a prefix may land, never a merge); one round trip on JetStream. A
  chain sent again after it landed is refused as stale (ConcurrencyError: reload), unless it
  is a single event, whose repeat is known as for `append`.
- `append_fenced([(subject, item), ...], expect_last_seq, filter, more=[(index, seq, filter)])`:
  events on several subjects, all or none, refused (ConcurrencyError) if any subject matching
  `filter` holds an event after `expect_last_seq` (an apply validated against everything the
  filter matched: the governance entities of a kind); each of `more` fences the same way from
  the entry at `index` on, on subjects that no entry before it touches (two aggregates saved in
  one store: a cluster's events and its job's, each on its own fence).
- `submit(subject, item)`: `append(subject, [item])` with no expected sequence, from synchronous
  code: the returned future gets the event's sequence (or the error). For events whose
  idempotency key makes a repeat harmless (a provisioner's claims and outcomes); with group
  commit on, the JetStream adapter sends it with the others that wait, or at once with `now`
  when nothing else is on its way (the latency of one event matters more than a group).
- `read(filter)`: every event on the subjects matching the NATS filter (`*` one token, `>` the
  rest), in log order, including everything acknowledged to anyone before the call.
- `read_heads(filter)`: the same events as `read` gives, each as its `Head` (sequence, subject,
  type and idempotency key from its headers), its body neither fetched nor decoded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Protocol

from contracts.records import Append, Head, Recorded

__all__ = ["Append", "ConcurrencyError", "EventLog", "Head", "Recorded", "StoreError"]


class ConcurrencyError(Exception):
    """A stale writer: the subject moved on since the writer read it."""


class StepEnded(ConcurrencyError):
    """A segment step's claim refused because the planner ended that step unrun (its `StepClosed`
    is stored: the step before failed or timed out, docs/decisions/0058), not because its job's
    cancel fence is closed."""


class StoreError(Exception):
    pass


class EventLog(Protocol):
    async def append(self, subject: str, items: Sequence[Append], expect_last_seq: int | None = None) -> list[int]:
        """Append `items` to `subject`; returns their sequences (see the module's contract)."""
        ...

    async def append_chain(self, parts: Sequence[tuple[str, Sequence[Append], int | None]]) -> list[list[int]]:
        """Each part's events appended one at a time in order (see the module's contract)."""
        ...

    async def append_fenced(self, entries: Sequence[tuple[str, Append]], expect_last_seq: int,
                            subject_filter: str, more: Sequence[tuple[int, int, str]] = ()) -> list[int]:
        """Several subjects' events at once, fenced on a filter's subjects (see the module's contract)."""
        ...

    def submit(self, subject: str, item: Append, *, now: bool = False) -> asyncio.Future[int]:
        """Append one event, no expected sequence, without awaiting (see the module's contract)."""
        ...

    async def last_seq(self, subject: str) -> int:
        """The sequence of the subject's last event, 0 if it has none."""
        ...

    async def read(self, subject_filter: str, start_seq: int = 1, up_to_seq: int | None = None) -> list[Recorded]:
        ...

    async def read_through(self, subject: str, seq: int) -> list[Recorded]:
        """The subject's events up to and including the one at `seq`, an event of it the caller
        was delivered (a consumer's): the read includes it even where the reader's replica of a
        replicated log has not applied it yet (muster.bus.scopedlog)."""
        ...

    async def read_heads(self, subject_filter: str, start_seq: int = 1, up_to_seq: int | None = None) -> list[Head]:
        """`read`'s events as their heads only (see the module's contract)."""
        ...

    async def read_many(self, subject_filters: Sequence[str], up_to_seq: int | None = None) -> list[Recorded]:
        ...

    async def subjects(self, subject_filter: str) -> dict[str, int]:
        """Every subject matching the filter that holds events, with how many."""
        ...

    async def subject_names(self, subject_filter: str) -> set[str]:
        """Every subject matching the filter that holds events (a reader whose rights do not
        let it count them: muster.bus.scopedlog)."""
        ...

    async def replay(self, subject_filter: str | Sequence[str], on_event: Callable[[Recorded], None], timeout: float = 600.0,
                     *, start_seq: int = 1, bodies: bool = True) -> int:
        """Feed every event matching the filter (or any of several), from `start_seq` on, in log
        order, to `on_event`; returns how many. `bodies=False`: an event whose body is stored
        apart (a big plan) is handed over as its stub (`muster.bus.bodies.Offloaded`: its type
        only), for a reader that needs only which events there are, where and when."""
        ...
