"""`ensure_replicas` (muster/bus/replicas.py) against a fake JetStream API: it raises a short
stream's replicas and changes nothing else of its config (a field nats-py does not know
included), never lowers them, tells a stream that is not there, and reads the stream again when
its update goes unanswered (another service's landed, or this connection may not update)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from nats.errors import TimeoutError as NatsTimeout

from contracts import nodemaps, subjects
from muster.bus import budgets, shards, snapshotstore, spend
from muster.bus.replicas import BUCKETS, INFO_TRIES, UPDATE_TRIES, ensure_replicas


@dataclass
class Msg:
    data: bytes


class FakeSub:
    async def unsubscribe(self) -> None:
        pass


@dataclass
class FakeApi:
    config: dict[str, Any] | None
    answer_updates: bool = True
    others_update: bool = False
    """an update unanswered is applied anyway (another service's landed)"""
    updates: list[dict[str, Any]] = field(default_factory=list)
    info_s: float = 0.0
    """how long a stream's info takes to be answered (a busy server): a shorter wait runs out"""
    lost: int = 0
    """how many of the first updates go unanswered and unapplied (a route being joined again)"""
    infos_lost: int = 0
    """how many of the first infos go unanswered (the same)"""
    infos: int = 0

    async def subscribe(self, subject: str, cb: Any) -> FakeSub:
        return FakeSub()  # (the fake's stream answers no `cluster`: one server, no leader to wait for)

    async def request(self, subject: str, payload: bytes, timeout: float) -> Msg:
        verb = subject.split(".")[3]
        if verb == "INFO":
            self.infos += 1
            if timeout < self.info_s or self.infos <= self.infos_lost:
                raise NatsTimeout
        if self.config is None:
            return Msg(json.dumps({"error": {"err_code": 10059, "description": "stream not found"}}).encode())
        if verb == "UPDATE":
            self.updates.append(json.loads(payload))
            if len(self.updates) <= self.lost:
                raise NatsTimeout
            if not self.answer_updates:
                if self.others_update:
                    self.config = json.loads(payload)
                raise NatsTimeout
            self.config = json.loads(payload)
        return Msg(json.dumps({"config": self.config}).encode())


@dataclass
class FakeJs:
    _nc: FakeApi


def _config(replicas: int) -> dict[str, Any]:
    return {"name": "KV_presence", "num_replicas": replicas, "subject_delete_marker_ttl": 60_000_000_000,
            "a_field_of_a_newer_server": {"kept": True}}


async def test_a_short_stream_is_given_the_replicas_and_nothing_else_changes() -> None:
    api = FakeApi(_config(1))
    assert await ensure_replicas(FakeJs(api), "KV_presence", 3) == 3  # type: ignore[arg-type]
    assert api.updates == [_config(3)]


@pytest.mark.parametrize("have", [3, 5])
async def test_enough_replicas_are_left_as_they_are(have: int) -> None:
    api = FakeApi(_config(have))
    assert await ensure_replicas(FakeJs(api), "KV_presence", 3) == have  # type: ignore[arg-type]
    assert api.updates == []


async def test_no_such_stream() -> None:
    assert await ensure_replicas(FakeJs(FakeApi(None)), "KV_spend", 3) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(("others_update", "now"), [(True, 3), (False, 1)])
async def test_an_unanswered_update_is_judged_by_what_the_stream_has_after(others_update: bool, now: int) -> None:
    api = FakeApi(_config(1), answer_updates=False, others_update=others_update)
    assert await ensure_replicas(FakeJs(api), "KV_presence", 3, timeout=0.01) == now  # type: ignore[arg-type]


async def test_a_stream_whose_info_comes_after_the_updates_wait_is_still_given_its_replicas() -> None:
    """A server busy for a moment answers a stream's info after 2.5 s: with the update's 2 s for
    it, the check ended in a timeout, no update was sent and the bucket stayed short until the
    auth service's next start (a suspect of test_replicas_auth.py's 20 s wait in CI)."""
    api = FakeApi(_config(1), info_s=2.5)
    assert await ensure_replicas(FakeJs(api), "KV_presence", 3, may_update=True) == 3  # type: ignore[arg-type]
    assert api.updates == [_config(3)]


def test_the_list_names_every_bucket_muster_makes() -> None:
    made = {subjects.PRESENCE_BUCKET, subjects.LOCATIONS_BUCKET, shards.BUCKET, snapshotstore.BUCKET, nodemaps.BUCKET,
            budgets.BUCKET, spend.BUCKET}
    assert set(BUCKETS) == made


async def test_an_update_lost_while_the_clusters_routes_are_joined_again_is_sent_again() -> None:
    """A fresh cluster may close a pair of its nodes' routes as duplicates and join them again a
    second later (docs/testing.md, "Known intermittent"): the update sent meanwhile went
    unanswered, the stream stayed short, and the auth service left it so until its next start
    (a suspect of test_replicas_auth.py's 20 s wait for the update's advisory)."""
    api = FakeApi(_config(1), lost=1)
    assert await ensure_replicas(FakeJs(api), "KV_presence", 3, timeout=0.01, may_update=True) == 3  # type: ignore[arg-type]
    assert api.updates == [_config(3), _config(3)]


async def test_an_update_never_answered_is_sent_a_bounded_number_of_times() -> None:
    api = FakeApi(_config(1), answer_updates=False)
    assert await ensure_replicas(FakeJs(api), "KV_presence", 3, timeout=0.01, may_update=True) == 1  # type: ignore[arg-type]
    assert len(api.updates) == UPDATE_TRIES


async def test_an_info_lost_while_the_clusters_routes_are_joined_again_is_asked_again() -> None:
    """Session 36's `.ci/run`: a provisioner's INFO of the presence bucket went unanswered for its
    10 s in test_replicas_auth.py, and the provisioner's start failed on it."""
    api = FakeApi(_config(1), infos_lost=INFO_TRIES - 1)
    assert await ensure_replicas(FakeJs(api), "KV_presence", 3, may_update=True) == 3  # type: ignore[arg-type]
    never = FakeApi(_config(1), infos_lost=INFO_TRIES)
    with pytest.raises(NatsTimeout):
        await ensure_replicas(FakeJs(never), "KV_presence", 3, may_update=True)  # type: ignore[arg-type]
    assert never.infos == INFO_TRIES and never.updates == []
