"""`muster demo --pool` run again on the same data directory (walk of session 27): the earlier
run's hosts (SSH servers gone with it) were left in pool lab, the new ones registered under the
same ids were all ambiguous, and the demo waited 10 minutes for hosts. The pool service is
faked here (its commands' answers); tests/e2e/test_demo.py runs the demo twice for real."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import click
import pytest
from rich.console import Console

from contracts.pool_commands import PoolAnswer, RemoveHost, ShowPool
from muster.runtime import pool_demo


class Pool:
    def __init__(self, hosts: list[dict[str, Any]] | None) -> None:
        self.hosts = hosts  # None: no pool lab yet
        self.sent: list[Any] = []

    async def send(self, nc: Any, pool: str, command: Any) -> PoolAnswer:
        self.sent.append(command)
        if self.hosts is None:
            raise pool_demo.pools.PoolRejected("no pool 'lab': there are no pools yet", "not_found")
        if isinstance(command, ShowPool):
            return PoolAnswer(view={"hosts_detail": self.hosts})
        assert isinstance(command, RemoveHost)
        return PoolAnswer(message=f"host {command.host_id} removed")


class Client:
    nc = None


async def _clear(monkeypatch: pytest.MonkeyPatch, pool: Pool) -> str:
    monkeypatch.setattr(pool_demo.pools, "send", pool.send)
    sink = io.StringIO()
    await pool_demo.clear_earlier_run(Client(), Path(".muster"), Console(file=sink))  # type: ignore[arg-type]
    return sink.getvalue()


async def test_a_first_run_finds_no_pool_and_removes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = Pool(None)
    assert await _clear(monkeypatch, pool) == "" and [type(c) for c in pool.sent] == [ShowPool]


async def test_the_hosts_an_earlier_run_left_leave_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = Pool([{"id": "lab-large-1", "holder": None}, {"id": "lab-small-1", "holder": None}])
    said = await _clear(monkeypatch, pool)
    assert [c.host_id for c in pool.sent if isinstance(c, RemoveHost)] == ["lab-large-1", "lab-small-1"]
    assert "the 2 hosts of an earlier run on .muster removed" in said


async def test_hosts_still_held_stop_the_demo_naming_the_way_out(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = Pool([{"id": "lab-large-1", "holder": {"cluster_id": "c-shop", "node_id": "n1000"}}, {"id": "lab-small-1", "holder": None}])
    with pytest.raises(click.ClickException) as raised:
        await _clear(monkeypatch, pool)
    said = raised.value.message
    assert "did not finish (c-shop)" in said and "another --data-dir" in said and "muster cluster delete c-shop" in said
    assert not any(isinstance(c, RemoveHost) for c in pool.sent)  # nothing half done
