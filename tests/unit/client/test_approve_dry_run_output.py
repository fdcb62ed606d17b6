"""`muster job approve --dry-run` says what an approval now would find (decision 42), not that a
plan was saved (an approval's look saves none: the job's plan is recorded with it)."""

from __future__ import annotations

import pytest

from contracts.commands import DryRun
from muster.ops_session import print_dry_run


def test_an_approvals_look_says_nothing_was_decided_and_what_the_policies_say_now(capsys: pytest.CaptureFixture[str]) -> None:
    reply = DryRun(plan={"tasks": [], "stages": []}, cost={"per_hour": 0.3, "before_per_hour": 0, "per_node": {}, "by_hardware": {}},
                   policy={"deny": ["over budget (policy budget)"], "warn": [], "approval": []},
                   warnings=["it costs 0.30/h at the catalog's prices now (0.15/h when it was requested)"])
    print_dry_run("approve", reply)
    said = capsys.readouterr().out
    assert "nothing was decided" in said and "the plan is saved" not in said and "cluster apply" not in said
    assert "policy would deny: over budget (policy budget)" in said and "an approval now is refused" in said
    assert "warning: it costs 0.30/h at the catalog's prices now (0.15/h when it was requested)" in said
