"""A write to a job through the tracker drops the job's reused `GET /v1/jobs/{id}` answer: the
writer's next read shows what its write did, though the tracker's index has not applied it yet
(an approval a policy refused, then a `GET` that still said `waiting_for_approval`: found as an
intermittent failure of tests/integration/services/test_approval_judged_again.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from contracts.commands import Rejected
from muster.ports.memory import MemoryEventLog
from services.tracker import writes
from services.tracker.app import Tracker
from services.tracker.write_api import BY_NAME

T, JOB = "acme", "8f669c0a-421a-5975-81bd-a390cac7827c"


class Unchanged:
    """The index: the job's version as it was before the write (not applied yet)."""

    def job_version(self, tenant: str, job_id: str) -> int:
        return 7


def tracker_saying(states: list[str]) -> Tracker:
    tracker = Tracker(MemoryEventLog(), index=cast(Any, SimpleNamespace(mirror=Unchanged())), max_age=30.0, nc=cast(Any, None))

    async def status(tenant: str, job_id: str) -> dict[str, Any]:
        return {"id": job_id, "state": states[0]}

    tracker.job_status = status  # type: ignore[method-assign]
    return tracker


async def test_a_write_through_the_tracker_makes_the_next_read_fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    states = ["waiting_for_approval"]
    tracker = tracker_saying(states)
    assert b"waiting_for_approval" in (await tracker.job_status_json(T, JOB) or b"")

    class Planner:
        def __init__(self, *_: Any, **__: Any) -> None:
            pass

        async def request(self, command: Any) -> Rejected:
            states[0] = "failed"  # the planner recorded the approval and its denial, then answered
            return Rejected(reason="the tenant's policies deny it now", code="forbidden", job_id=JOB)

    monkeypatch.setattr(writes, "MusterClient", Planner)
    assert b"waiting_for_approval" in (await tracker.job_status_json(T, JOB) or b"")  # reused: nothing written yet
    bus = cast(Any, SimpleNamespace(own=None))
    written = await writes.submit(tracker, bus, writes.Actor(T, "apo", None), BY_NAME["approve_job"], {"job_id": JOB}, {})
    assert written.status == 403
    assert b'"failed"' in (await tracker.job_status_json(T, JOB) or b"")
