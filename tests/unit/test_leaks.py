"""The session's guard against what asyncio says was left behind (tests/leaks.py, checked at the
session's end by tests/conftest.py) hears it, with the test that was running."""

from __future__ import annotations

import asyncio
import gc

import pytest

from tests.leaks import LEAKS


def test_a_task_destroyed_pending_is_heard_with_the_test_that_ran(request: pytest.FixtureRequest) -> None:
    gc.collect()  # (what earlier tests left is theirs)
    heard = len(LEAKS.found)
    loop = asyncio.new_event_loop()
    loop.create_task(asyncio.sleep(3600))  # (its only reference is the closed loop's, gone with it)
    loop.run_until_complete(asyncio.sleep(0))
    loop.close()  # without cancelling what still runs, as a loop on a thread of a fixture did
    gc.collect()
    new, LEAKS.found[heard:] = LEAKS.found[heard:], []  # (this one was made on purpose: not the session's failure)
    assert [(test, said.partition("\n")[0]) for test, said in new] == [(request.node.nodeid, "Task was destroyed but it is pending!")]
    assert "coro=<sleep()" in new[0][1]

