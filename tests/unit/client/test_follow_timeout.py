"""`--wait --timeout` on a request about a job (`muster job cancel J --wait`) follows the job from
that request on: with none of its story seen, it said the running job "is still not started"
(a new user's walk, session 20)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from contracts.records import Recorded
from muster.cli_support import EXIT_UNREACHABLE, CliError
from muster.ops_session import follow

JOB = "d0787fbf-57ef-5acc-aa60-925b000e2553"


async def _silent() -> AsyncIterator[Recorded]:
    await asyncio.Event().wait()  # no event comes (its tasks wait for a provisioner)
    yield  # type: ignore[misc]  # (an async generator)


async def test_a_timeout_before_any_of_the_jobs_story_says_it_has_not_ended() -> None:
    with pytest.raises(CliError) as waited:
        await follow(_silent(), JOB, "cancel", ["JobRolledBack"], 0.05, quiet=True)
    assert waited.value.exit_code == EXIT_UNREACHABLE
    assert waited.value.format_message() == (f"job {JOB} has not ended after 0.05 s (--timeout); it goes on without us "
                                             f"(`muster watch {JOB}`)")
