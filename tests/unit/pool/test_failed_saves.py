"""A pool decision whose save failed while the log could not be read either (a partition)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from contracts import subjects
from contracts.pool_commands import AddHosts, PoolAnswer
from muster.bus.repository import rebuild
from muster.ports.memory import ManualClock, MemoryEventLog
from services.pool.adapters.callbacks import CallbackSender
from services.pool.app import PoolService
from services.pool.domain.pool import Pool

from .pool_support import host


async def test_a_copy_the_log_could_not_correct_is_read_again_before_the_next_decision() -> None:
    """The copy in memory held the host its failed save never stored; decided on, the same
    command sent again was refused as "already in pool", and the host was in no log."""
    log = MemoryEventLog(ManualClock())
    service = PoolService(nc=None, store=log, sender=CallbackSender(None))  # type: ignore[arg-type]
    add = AddHosts(hosts=[host(1)]).model_dump_json().encode()
    assert isinstance(await service.handle_command("p", "add-hosts", add, "root"), PoolAnswer)
    unavailable = TimeoutError("nats: JetStream system temporarily unavailable")

    def split(subject: str, items: Sequence[Any]) -> bool:
        log.unreadable = unavailable  # (the read after the failed save fails too)
        return True

    log.inject(split, unavailable)
    again = AddHosts(hosts=[host(2)]).model_dump_json().encode()
    for _ in range(2):
        with pytest.raises(TimeoutError):
            await service.handle_command("p", "add-hosts", again, "root")
    log.unreadable = None
    answer = await service.handle_command("p", "add-hosts", again, "root")
    assert isinstance(answer, PoolAnswer), answer
    stored = rebuild(Pool, await log.read(subjects.pool_events("p")))
    assert stored is not None and set(stored.book.hosts) == {host(1).id, host(2).id}
    await service.close()


def test_a_command_the_log_did_not_answer_is_to_be_sent_again_and_a_bug_is_an_internal_error() -> None:
    from services.pool.entrypoint import _failed

    again = _failed("muster.pool.root.p.add-hosts", TimeoutError("nats: timeout"))
    assert again.retry and again.code == "unavailable" and "send the command again" in again.reason
    bug = _failed("muster.pool.root.p.add-hosts", KeyError("x"))
    assert not bug.retry and bug.reason.startswith("internal error")
