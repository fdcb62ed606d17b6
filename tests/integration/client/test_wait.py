"""A follow of a job's events outlives a lost subscription. The nemesis soak (docs/faults.md)
once waited its whole deadline for a job that had succeeded: nats-py had not made again the
ordered consumer lost with the NATS node that held it. `MusterClient.events` (under `wait`
and the CLI's `--wait`) subscribes again from the last event it saw when it hears nothing for
`QUIET_S`: nothing repeated, nothing skipped."""

from __future__ import annotations

from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from contracts import subjects
from contracts.events import JobPaused, JobResumed, JobSucceeded
from contracts.records import Append
from muster.bus.eventstore import EventStore
from muster.client import MusterClient

pytestmark = [pytest.mark.nats, pytest.mark.timeout(60)]


async def _append(nc: Client, tenant: str, job_id: str, event: Any, n: int) -> int:
    [seq] = await EventStore(nc).append(subjects.job_events(tenant, job_id), [Append(event, msg_id=f"{job_id}-{n}")])
    return seq


def _losing_the_first_consumer(client: MusterClient, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The first subscription delivers nothing (a consumer lost with its node); later ones work.
    Returns the list of subscriptions made (their count)."""
    real = client.js.subscribe
    made: list[int] = []

    async def subscribe(subject: str, **kwargs: Any) -> Any:
        made.append(1)
        if len(made) == 1:
            async def lost(_: Msg) -> None:
                return None

            kwargs["cb"] = lost
        return await real(subject, **kwargs)

    monkeypatch.setattr(client.js, "subscribe", subscribe)
    return made


async def test_a_final_event_a_lost_consumer_never_delivered_is_seen_by_the_next(nc: Client, tenant: str,
                                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    await _append(nc, tenant, "j-missed", JobSucceeded(job_id="j-missed"), 1)
    client = MusterClient(nc, tenant=tenant)
    monkeypatch.setattr(client, "QUIET_S", 0.5)
    made = _losing_the_first_consumer(client, monkeypatch)
    assert await client.wait("j-missed", timeout=10) == JobSucceeded(job_id="j-missed")
    assert len(made) == 2


async def test_a_quiet_follow_goes_on_from_the_last_event_it_saw(nc: Client, tenant: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    first = await _append(nc, tenant, "j-long", JobSucceeded(job_id="j-long"), 1)  # an earlier run's end
    await _append(nc, tenant, "j-long", JobPaused(job_id="j-long"), 2)
    client = MusterClient(nc, tenant=tenant)
    monkeypatch.setattr(client, "QUIET_S", 0.3)
    real = client.js.subscribe
    made = 0

    async def subscribe(subject: str, **kwargs: Any) -> Any:
        nonlocal made
        made += 1
        sub = await real(subject, **kwargs)
        if made == 2:  # the job goes on only after a quiet spell the follow had to sit out
            await _append(nc, tenant, "j-long", JobResumed(job_id="j-long"), 3)
            await _append(nc, tenant, "j-long", JobSucceeded(job_id="j-long"), 4)
        return sub

    monkeypatch.setattr(client.js, "subscribe", subscribe)
    seen = [r.type async for r in client.events("j-long", since_seq=first)]
    assert seen == ["JobPaused", "JobResumed", "JobSucceeded"] and made == 2


async def test_a_job_that_never_ends_times_out_at_the_callers_deadline(nc: Client, tenant: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    client = MusterClient(nc, tenant=tenant)
    monkeypatch.setattr(client, "QUIET_S", 0.2)
    with pytest.raises(TimeoutError):
        await client.wait("j-never", timeout=1)
