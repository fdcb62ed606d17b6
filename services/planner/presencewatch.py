"""The planner's watch of the provisioners' presence (docs/decisions/0054): `gone(id)` for each
provisioner whose record expires or is deleted, or whose new session's record has been there long
enough (`Sessions`).

A watch that cannot start (the bucket unreadable: a cluster without a leader for the stream yet,
a stream of other settings in its place) is started again after a backoff that doubles, each
failure logged, until it starts or the planner stops: until then a cancel still finds the
claimers gone when it closes its fence (it asks the bucket itself, and waits for the sessions
registered on the log from when it first found a record gone), and what goes in the meantime
waits for its attempts' timeouts. Before, such a planner never watched.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from contextlib import AsyncExitStack
from typing import Any

import structlog
from nats.aio.client import Client

from services.provisioner.presence import Change, PresenceWatch

from .adapters import Sessions

log = structlog.get_logger("muster.planner")

FIRST_RETRY_S = 1.0
MAX_RETRY_S = 60.0


async def watch_presence(nc: Client, stack: AsyncExitStack, sessions: Sessions,
                         gone: Callable[[str], Coroutine[Any, Any, None]],
                         first_retry_s: float = FIRST_RETRY_S, max_retry_s: float = MAX_RETRY_S) -> None:
    """Start the watch (at once if it can, else in the background, retried), stopped with `stack`."""
    tasks: set[asyncio.Task[None]] = set()
    watches: list[PresenceWatch] = []

    def stopped(pid: str) -> None:
        task = asyncio.get_running_loop().create_task(gone(pid), name=f"provisioner-gone-{pid}")
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def on_change(pid: str, record: Any, change: Change) -> None:
        sessions.seen(pid, record)
        if record is None:
            stopped(pid)

    async def start(retry_in_s: float) -> bool:
        watch = PresenceWatch(nc.jetstream(), on_change=on_change)
        try:
            await watch.start()
        except asyncio.CancelledError:  # (the planner stops while it starts)
            await watch.stop()
            raise
        except Exception as err:  # noqa: BLE001 - tried again; a cancel's close still asks meanwhile
            await watch.stop()
            log.warning("provisioners' presence not watched; trying again", error=str(err) or type(err).__name__,
                        retry_in_s=retry_in_s)
            return False
        watches.append(watch)
        if sessions.watching_since is None:  # (an id it never saw had no record from then on: decision 54)
            sessions.watching_since = asyncio.get_running_loop().time()
        return True

    async def retry() -> None:
        delay, tries = first_retry_s, 1
        while True:  # a doubling backoff of a failed start, ended by its success: not a poll of state
            await asyncio.sleep(delay)
            delay, tries = min(max_retry_s, delay * 2), tries + 1
            if await start(delay):
                log.info("provisioners' presence watched", tries=tries)
                return

    sessions.on_settled = stopped
    if not await start(first_retry_s):
        tasks.add(asyncio.get_running_loop().create_task(retry(), name="presence-watch-retry"))

    async def stop() -> None:
        for task in list(tasks):  # (first: a retry may be starting a watch)
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for watch in watches:
            await watch.stop()
        sessions.close()

    stack.push_async_callback(stop)
