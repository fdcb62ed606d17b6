"""Routing tables: how a service declares what it consumes from the log (pure, no NATS).

A `Route` is one durable consumer and, per event type, the service method that takes it; event
types the table does not name are acknowledged and ignored (on JetStream unread: their type
header is enough, `muster.bus.consume`). Every service keeps its table in
its own `routing.py`, so `grep` of an event's name shows all its consumers (docs/bus.md lists
them, and a test checks that list against the tables). `muster.bus.consume.consume_routes`
subscribes a table on JetStream; the planner's unit harness drives the same table in memory.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contracts.records import Recorded

Handler = Callable[[Recorded], Awaitable[None]]
BatchHandler = Callable[[Sequence[Recorded]], Awaitable[None]]


class NotYet(Exception):
    """A handler cannot decide about this event yet (a planner whose lease on the event's
    cluster is being renewed late does not know whether it acts for it): the event is delivered
    again a little later, and this never makes it poison."""


@dataclass(frozen=True)
class Route:
    """One durable consumer of the log and what a service does with each event type on it.
    Event types the table does not name are acknowledged and ignored, so `grep` of an event's
    name over the services' routing tables shows every consumer (docs/bus.md lists them)."""

    durable: str
    filter: str
    handlers: Mapping[str, str]
    """Event type -> the name of the service's method that takes it."""
    queue: str | None = None
    """A queue group: the service's instances share the events (each reaches one)."""
    also: tuple[str, ...] = ()
    """More subjects the same consumer takes (its filter is `filter` and these)."""
    batch: str | None = None
    """The service's method that takes the events delivered together, as a list in order (a
    consumer of one subscriber: `muster.bus.consume.consume_batches`); it does with each what
    the method `handlers` names for its type does, so one at a time stays right too."""
    deliver: str | None = None
    """Where the durable delivers, a subject every identity of the service may subscribe to
    (instances under several identities share the queue); None: the inbox of the instance that
    made it, which only that identity may subscribe to."""
    stubs: frozenset[str] = frozenset()
    """Event types handed over as they sit in the log when their body is stored apart (the
    event is then a `muster.bus.bodies.Offloaded`, its body not fetched nor decoded): for a
    handler that reads a little of a big one itself (the tracker's index: a plan's size)."""


def router(service: Any, route: Route) -> Handler:
    """The consumer's handler: each event to the method the table names."""
    handlers: dict[str, Handler] = {t: getattr(service, name) for t, name in route.handlers.items()}

    async def on_event(recorded: Recorded) -> None:
        handler = handlers.get(recorded.type)
        if handler is not None:
            await handler(recorded)

    return on_event


def batch_router(service: Any, route: Route) -> BatchHandler:
    """The batch consumer's handler: the events of the types the table names, to `route.batch`."""
    assert route.batch is not None
    take: BatchHandler = getattr(service, route.batch)
    wanted = frozenset(route.handlers)

    async def on_events(batch: Sequence[Recorded]) -> None:
        mine = [r for r in batch if r.type in wanted]
        if mine:
            await take(mine)

    return on_events
