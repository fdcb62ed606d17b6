"""The auth service exits, to be started again, when nats-py gives one of its connections up
for good, however it does (here as it does when an -ERR comes while it reconnects: `_close`
with no callbacks, which muster.bus.wire.on_closed still reports)."""

from __future__ import annotations

import asyncio
import signal

import pytest
from nats.aio.client import Client

from services.auth import entrypoint

from .conftest import Authed

DEADLINE_S = 10


@pytest.mark.parametrize("which", ["nc", "sys_nc", "callout_nc"])
async def test_any_connection_closed_for_good_makes_the_auth_service_exit(authed: Authed, which: str) -> None:
    service = authed.service
    closing: list[asyncio.Task[None]] = []
    loop = asyncio.get_running_loop()
    loop.call_later(0.2, lambda: closing.append(asyncio.ensure_future(
        getattr(service, which)._close(Client.CLOSED, do_cbs=False))))
    try:
        with pytest.raises(SystemExit) as exited:  # (in this task: asyncio lets a task's SystemExit out of the loop)
            async with asyncio.timeout(DEADLINE_S):
                await entrypoint._run(_Started(service))  # type: ignore[arg-type]
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await asyncio.gather(*closing, return_exceptions=True)
    assert exited.value.code == 1 and service.lost.is_set()

async def test_its_own_stop_is_not_taken_for_a_lost_connection(authed: Authed) -> None:
    await authed.service.stop()
    assert not authed.service.lost.is_set()


class _Started:
    """The fixture's running service, as `_run` starts one (its start is done already)."""

    def __init__(self, service: object) -> None:
        self._service = service

    def __getattr__(self, name: str) -> object:
        return getattr(self._service, name)

    async def start(self) -> object:
        return self._service
