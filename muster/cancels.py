"""A task whose cancel Python 3.11's `asyncio.wait_for` lost ends at its next indefinite wait,
instead of waiting on as if nobody had asked (`next_item`, `cancel_asked`).

3.11's `wait_for` cancelled in the same turn of the loop as the awaitable it waits on completes
returns that awaitable's result and drops the cancel (python/cpython gh-86296, fixed in 3.12 by
a new `wait_for`). Every request of nats-py waits so: a task cancelled once, as a reply comes,
carries on. Such a task still counts the request (`Task.cancelling()` stays above zero: nothing
withdrew it), which is what it is known by here. Bounded work goes on to its end regardless; only
a wait with no end of its own (a stream's next event) must look, and these do.
"""

from __future__ import annotations

import asyncio
from typing import TypeVar

T = TypeVar("T")


def cancel_asked() -> bool:
    """The running task has been asked to cancel and that request is still standing."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def next_item(queue: asyncio.Queue[T], timeout: float | None) -> T:
    """`queue`'s next item; TimeoutError after `timeout` seconds without one. A task whose
    cancel was lost on the way here (or by this very wait, an item coming as it was cancelled:
    then at the next call) gets its CancelledError now."""
    if cancel_asked():
        raise asyncio.CancelledError("a cancel asked before and lost by a wait_for")
    return await asyncio.wait_for(queue.get(), timeout)
