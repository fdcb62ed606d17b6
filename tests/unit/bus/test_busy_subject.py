"""An append expecting its subject's last sequence, refused busy (10164: another write expecting
that subject is in flight on the stream leader), on a fake of the server: busy decides nothing,
so the write goes again until the leader decides; only a stale expectation (10071) whose
subject's last event is not the append's own is a conflict. (A soak of session 37: a solver
took busy for "already answered", acked the request, and its job waited for good.)"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from contracts.events import LayoutSolved
from contracts.layout import Layout
from contracts.records import H_EXPECT, H_MSG_ID, Append
from muster.bus import appends
from muster.bus.appends import LogWriter
from muster.ports.eventlog import ConcurrencyError, StoreError

SUBJECT = "muster.evt.t.layout.j"


class BusyServer:
    """Stores single publishes by subject; answers busy (10164) to the first `busy` publishes
    that expect a sequence (the in-flight write they met is lost with its leader's term: it
    never lands), and a stale expectation with 10071."""

    def __init__(self, busy: int) -> None:
        self.stored: list[tuple[str, dict[str, str]]] = []
        self.busy = busy
        self.sent = 0

    async def start(self) -> None:
        return None

    def future(self, subject: str, data: bytes, headers: dict[str, str], timeout: float, now: bool = False) -> asyncio.Future[bytes]:
        self.sent += 1
        answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        last = max((i + 1 for i, (s, _) in enumerate(self.stored) if s == subject), default=0)
        if H_EXPECT in headers and self.busy > 0:
            self.busy -= 1
            answer.set_result(json.dumps({"error": {"err_code": 10164, "description": "wrong last sequence"}}).encode())
        elif H_EXPECT in headers and int(headers[H_EXPECT]) != last:
            answer.set_result(json.dumps({"error": {"err_code": 10071, "description": f"wrong last sequence: {last}"}}).encode())
        else:
            self.stored.append((subject, dict(headers)))
            answer.set_result(json.dumps({"seq": len(self.stored)}).encode())
        return answer

    async def last_of(self, subject: str) -> tuple[int, dict[str, str]] | None:
        found = [(i + 1, h) for i, (s, h) in enumerate(self.stored) if s == subject]
        return found[-1] if found else None


class _Writer(LogWriter):
    server: BusyServer

    @property
    def publisher(self) -> Any:
        return self.server


def _writer(server: BusyServer) -> LogWriter:
    writer = _Writer(None, None, server.last_of, 1.0)  # type: ignore[arg-type]  # (no connection: the fake)
    writer.server = server
    return writer


def _answer(msg_id: str) -> Append:
    return Append(LayoutSolved(job_id="j", layout=Layout(nodes=0, layout=[]), solver="s"), msg_id=msg_id)


async def _asked(server: BusyServer) -> int:
    server.stored.append((SUBJECT, {H_MSG_ID: "j:layout:1"}))  # the request, as the planner left it
    return len(server.stored)


async def test_an_answer_refused_busy_goes_again_and_lands() -> None:
    server = BusyServer(busy=3)
    asked = await _asked(server)
    seqs = await _writer(server).append(SUBJECT, [_answer("j:layout-answer:1")], expect_last_seq=asked)
    assert seqs == [2]
    assert server.stored[-1][1][H_MSG_ID] == "j:layout-answer:1"
    assert server.sent == 4  # three busy answers, then stored


async def test_a_stale_expectation_is_still_a_conflict() -> None:
    server = BusyServer(busy=0)
    asked = await _asked(server)
    server.stored.append((SUBJECT, {H_MSG_ID: "j:layout-answer:other"}))  # another writer's answer landed
    with pytest.raises(ConcurrencyError):
        await _writer(server).append(SUBJECT, [_answer("j:layout-answer:1")], expect_last_seq=asked)


async def test_busy_then_stale_is_a_conflict_once_decided() -> None:
    """The write in flight was another's, and it landed: after the busy answer, the stale one."""
    server = BusyServer(busy=1)
    asked = await _asked(server)
    writer = _writer(server)
    task = asyncio.ensure_future(writer.append(SUBJECT, [_answer("j:layout-answer:1")], expect_last_seq=asked))
    await asyncio.sleep(0)  # its first try is refused busy; then the other lands
    server.stored.append((SUBJECT, {H_MSG_ID: "j:layout-answer:other"}))
    with pytest.raises(ConcurrencyError):
        await task


async def test_busy_for_longer_than_the_bound_is_not_taken_for_a_conflict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(appends, "FENCE_BUSY_S", 0.05)
    server = BusyServer(busy=10**6)
    asked = await _asked(server)
    with pytest.raises(StoreError) as refused:
        await _writer(server).append(SUBJECT, [_answer("j:layout-answer:1")], expect_last_seq=asked)
    assert not isinstance(refused.value, ConcurrencyError)
    assert "in flight" in str(refused.value)

