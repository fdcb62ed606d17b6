"""A new event recorded on an aggregate the short way: the library's event built and applied
as `@event` methods are, without its keyword machinery around each call.

eventsourcing turns a call of an `@event` method into keywords, filters them against the event
class, builds the event, then turns the event back into keywords filtered against the method:
about twice the work of building and applying the event itself, paid twice a task (its
`TaskQueued` and `TaskCompleted`; docs/benchmarks.md, "Scale: the planner's CPU a task",
session 29). For a method that takes the
payload alone (`(self, payload)`, every hot one of `Job`), the event is the same one: same class,
next version, timestamp, payload; applied by the method, then version and modified time set
and the event left pending, as `trigger_event` and `mutate` do. As `muster.bus.repository.fold`
does for events read back. Pure: no IO.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import cache
from typing import Any

from eventsourcing.domain import BaseAggregate, CommandMethodDecorator, decorated_func_callers


@cache
def _event(cls: type[BaseAggregate[Any]], method: str) -> tuple[type[Any], Callable[[Any, Any], None]]:
    decorator = inspect.getattr_static(cls, method)
    if not isinstance(decorator, CommandMethodDecorator):
        raise TypeError(f"{cls.__name__}.{method} is not an @event method")
    func = decorator.decorated_func
    if list(inspect.signature(func).parameters) != ["self", "payload"]:
        raise TypeError(f"{cls.__name__}.{method} does not take the payload alone")
    return decorated_func_callers[decorator], func


def record(aggregate: BaseAggregate[Any], method: str, payload: Any) -> None:
    """As `aggregate.<method>(payload)` (an `@event` method of `(self, payload)`)."""
    event_cls, func = _event(type(aggregate), method)
    version = aggregate.version + 1
    new = event_cls(originator_id=aggregate.id, originator_version=version, timestamp=event_cls.create_timestamp(),
                    payload=payload)
    func(aggregate, payload)
    aggregate.version = version
    aggregate.modified_on = new.timestamp
    aggregate.pending_events.append(new)
