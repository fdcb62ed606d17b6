"""`wire.cancel_and_wait`: a task that swallows a cancel (Python 3.11's `asyncio.wait_for` does when
the future it awaits completes at that moment, python/cpython#86296; nats-py's first connect awaits
in it and retries without end) is cancelled again until it ends. Before session 35 a service stopped
while NATS refused its connections waited on such a connect for ever (2 runs in 36 of a SIGTERM just
after the provisioner's first line, `tests/unit/provisioner_runtime/test_first_log_line.py` in a
four-worker run)."""

from __future__ import annotations

import asyncio

import pytest

from muster.bus import wire


async def test_a_task_that_swallows_its_first_cancel_is_cancelled_again_until_it_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire, "CANCEL_AGAIN_S", 0.01)
    swallowed = 0

    async def connecting_for_ever() -> None:
        nonlocal swallowed
        never = asyncio.Event()
        try:
            await never.wait()
        except asyncio.CancelledError:  # the one cancel wait_for lost
            swallowed += 1
        await never.wait()  # and it goes on, as nats-py's next try would, until cancelled again

    task = asyncio.ensure_future(connecting_for_ever())
    await asyncio.sleep(0)
    await asyncio.wait_for(wire.cancel_and_wait(task), 5)
    assert task.cancelled() and swallowed == 1


async def test_a_task_that_ends_at_the_first_cancel_is_waited_once() -> None:
    task = asyncio.ensure_future(asyncio.sleep(60))
    await asyncio.sleep(0)
    await wire.cancel_and_wait(task)
    assert task.cancelled()
