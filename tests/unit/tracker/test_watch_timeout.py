"""`muster watch --timeout` says what it knows when the time runs out: the job's state at the
last of its events read, and which one that was (a job over for hours, whose story was not read
to its end in time, was "still running"), or that none was read."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from contracts.events import JobRequested
from muster.cli_support import EXIT_UNREACHABLE, CliError
from services.tracker.cli import _watch

J = "11111111-1111-4111-8111-111111111111"


class Stalled:
    """A tracker whose job story gives `items`, then nothing more (a slow read)."""

    def __init__(self, *items: dict[str, Any]) -> None:
        self.items = items

    async def get(self, path: str, **params: Any) -> Any:
        return {"warnings": []}

    async def events(self, **selection: Any) -> AsyncIterator[dict[str, Any]]:
        for item in self.items:
            yield item
        await asyncio.Event().wait()


REQUESTED = {"seq": 7, "subject": f"muster.evt.t.job.{J}", "time": datetime(2026, 1, 1, tzinfo=UTC).isoformat(),
             "event": JobRequested(tenant="t", job_id=J, cluster_id="c", operation="create", request={}).model_dump(mode="json")}


async def test_the_state_is_said_as_of_the_last_event_read() -> None:
    with pytest.raises(CliError) as err:
        await _watch(Stalled(REQUESTED), J, 0.2)  # type: ignore[arg-type]
    assert err.value.exit_code == EXIT_UNREACHABLE
    assert err.value.message == (f"job {J} was running at the last of its events read (#7, 2026-01-01 00:00:00 UTC) "
                                 "when 0.2 s (--timeout) ran out")


async def test_no_event_read_is_said_so() -> None:
    with pytest.raises(CliError) as err:
        await _watch(Stalled(), J, 0.2)  # type: ignore[arg-type]
    assert err.value.message == f"job {J}: none of its events read within 0.2 s (--timeout)"


@pytest.mark.parametrize("timeout", ["0", "-1"])
def test_a_timeout_that_cannot_be_met_is_refused(timeout: str) -> None:
    from click.testing import CliRunner

    from muster.cli import main

    ran = CliRunner().invoke(main, ["watch", J, "--timeout", timeout])
    assert ran.exit_code == 2 and "Invalid value for '--timeout'" in ran.output
