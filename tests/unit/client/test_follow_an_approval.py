"""`--wait` (and `muster job wait`) in a pipe says when the job waits for an approver and when it
is decided. Walk of session 24: `muster cluster create c1 ... --wait` of a request a rule holds,
run from a script, printed its accepted line and then nothing until the approval (or `--timeout`,
an hour by default): no bar is drawn without a terminal, and nothing said it waited for a person."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from contracts import subjects
from contracts.approvals import JobApprovalRequested, JobApproved
from contracts.records import Recorded
from muster.cli_support import CliError
from muster.ops_session import follow

JOB = "981c729b-83bd-5e3b-8f20-d6d2fe3b0a9f"
T0 = datetime(2026, 11, 30, 20, 48, 42, tzinfo=UTC)


def at(seq: int, event: object) -> Recorded:
    return Recorded(seq=seq, subject=subjects.job_events("acme", JOB), time=T0, event=event)


async def story(*events: Recorded) -> AsyncIterator[Recorded]:
    for r in events:
        yield r
    await asyncio.Event().wait()  # then nothing: nobody decided yet


async def test_a_job_waiting_for_an_approver_is_said_and_so_is_its_decision(capsys: pytest.CaptureFixture[str]) -> None:
    asked = at(3, JobApprovalRequested(job_id=JOB, rules=["big"], expires_at=T0 + timedelta(days=1), digest="d", cluster_version=0))
    decided = at(4, JobApproved(job_id=JOB, by="ada", comment="looked at the plan"))
    with pytest.raises(CliError):
        await follow(story(asked, decided), JOB, "create", ["JobSucceeded"], 0.05)
    said = capsys.readouterr().err.splitlines()
    # The commands whole, with the job's id, to paste (walk of session 27: `approve|reject` alone).
    assert said == ["create: waits for approval (rules big) until 2026-12-01 20:48:42 UTC: an approver decides "
                    f"(`muster job approve {JOB}` or `muster job reject {JOB}`); --wait waits for the end "
                    "(Ctrl-C stops the waiting, not the job)",
                    "create: approved by ada: looked at the plan"], said


async def test_quiet_says_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    asked = at(3, JobApprovalRequested(job_id=JOB, rules=["big"], expires_at=T0 + timedelta(days=1), digest="d", cluster_version=0))
    with pytest.raises(CliError):
        await follow(story(asked), JOB, "create", ["JobSucceeded"], 0.05, quiet=True)
    assert capsys.readouterr().err == ""
