"""The auth service on a cluster that has just started: its first writes find no stream leader
("no response from stream", nothing stored) and are asked again, a bounded number of times."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from nats.js.errors import NoStreamResponseError

from muster.bus.wire import Refused
from services.auth import service as module
from services.auth.bootstrap import Bootstrap
from services.auth.keys import AuthKeys
from services.auth.service import AuthService


def _service(tmp_path: Path) -> AuthService:
    return AuthService("nats://127.0.0.1:1", AuthKeys.load_or_create(tmp_path), bootstrap=Bootstrap(tenants=("a",), principals=(), by="t"))


async def test_the_bootstrap_is_written_again_while_the_log_has_no_leader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []

    async def no_leader_twice(service: AuthService, spec: Bootstrap | None) -> None:
        calls.append(spec)
        if len(calls) < 3:
            raise NoStreamResponseError

    monkeypatch.setattr(module, "ensure_bootstrap", no_leader_twice)
    monkeypatch.setattr(module, "BOOTSTRAP_RETRIES", 2)
    service = _service(tmp_path)
    await service._bootstrap()
    assert calls == [service.bootstrap] * 3


async def test_a_publish_no_stream_took_yet_is_written_again_and_another_refusal_is_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 3-node cluster's fresh stream answered the bootstrap's first append 503 (its subjects'
    interest not yet on this server) and the auth service exited during `muster up`."""
    calls: list[Any] = []

    async def no_stream_once(service: AuthService, spec: Bootstrap | None) -> None:
        calls.append(spec)
        if len(calls) < 2:
            raise Refused("muster.evt._auth.tenant.default", "503")

    monkeypatch.setattr(module, "ensure_bootstrap", no_stream_once)
    monkeypatch.setattr(module, "BOOTSTRAP_RETRIES", 2)
    await _service(tmp_path)._bootstrap()
    assert len(calls) == 2

    async def refused(service: AuthService, spec: Bootstrap | None) -> None:
        raise Refused("muster.evt._auth.tenant.default", "400")

    monkeypatch.setattr(module, "ensure_bootstrap", refused)
    with pytest.raises(Refused):
        await _service(tmp_path)._bootstrap()


async def test_a_log_that_never_answers_fails_the_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_leader(service: AuthService, spec: Bootstrap | None) -> None:
        raise NoStreamResponseError

    monkeypatch.setattr(module, "ensure_bootstrap", no_leader)
    monkeypatch.setattr(module, "BOOTSTRAP_RETRIES", 1)
    with pytest.raises(NoStreamResponseError):
        await _service(tmp_path)._bootstrap()


async def test_the_identity_views_consumer_is_asked_again_when_a_new_cluster_is_slow_to_make_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster whose streams were declared a moment ago took over the JetStream API's 5 s to make
    the view's consumer, and `muster up` failed to start (a fault scenario, session 25)."""
    from nats.errors import TimeoutError as NatsTimeoutError

    starts: list[int] = []

    class SlowThenReady:
        def __init__(self, nc: Any, on_event: Any) -> None:
            pass

        async def start(self) -> SlowThenReady:
            starts.append(1)
            if len(starts) < 3:
                raise NatsTimeoutError
            return self

    monkeypatch.setattr(module, "IdentityView", SlowThenReady)
    service = _service(tmp_path)
    service.nc = None  # type: ignore[assignment]  # (the fake view connects to nothing)
    assert isinstance(await service._identity_view(), SlowThenReady) and len(starts) == 3
    starts.clear()
    with pytest.raises(NatsTimeoutError):
        await service._identity_view(tries=2)
    assert len(starts) == 2
