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


def test_a_warning_new_since_the_request_is_said_once(capsys: pytest.CaptureFixture[str]) -> None:
    """Walk of session 24: an approver's look printed `policy warns: tenant acme would have 39 of its
    40 nodes (policy nodes_per_tenant)` and, next to it, the same warning `(policy nodes_per_tenant;
    new since the request)`. Said once, with what it adds."""
    said = "tenant acme would have 39 of its 40 nodes"
    reply = DryRun(plan={"tasks": [], "stages": []}, policy={"deny": [], "warn": [f"{said} (policy nodes)", "older (policy p)"],
                                                              "approval": []},
                   warnings=[f"{said} (policy nodes; new since the request)"])
    print_dry_run("approve", reply)
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if said in line] == [f"warning: {said} (policy nodes; new since the request)"], lines
    assert "policy warns: older (policy p)" in lines


def test_an_allowed_look_names_the_command_that_approves_with_the_jobs_id(capsys: pytest.CaptureFixture[str]) -> None:
    """Walk of session 27: the commands a person is told to run are whole, with the job's id."""
    print_dry_run("approve", DryRun(plan={"tasks": [], "stages": []}, policy={"deny": [], "warn": [], "approval": []}), "j7")
    assert "the policies allow it now: `muster job approve j7` runs it" in capsys.readouterr().out


def test_a_dry_run_says_what_the_change_does_to_each_hardware_types_cost(capsys: pytest.CaptureFixture[str]) -> None:
    """An expand's preview says each type it changes, before and once done (`PlanCost` v2), a
    type its reader may not read `no price`; a type it leaves as it was says nothing, and a
    create, with nothing before, no line per type."""
    grown = {"per_hour": 0.5, "before_per_hour": 0.3, "per_node": {}, "unknown": ["large"],
             "by_hardware": {"small": 0.3, "medium": 0.2, "large": 0.0}, "before_by_hardware": {"small": 0.1, "medium": 0.2, "large": 0.0}}
    print_dry_run("expand", DryRun(plan={"tasks": [], "stages": []}, cost=grown))
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if line.startswith("  ") and ("→" in line or "no price" in line)] == [
        "  large no price", "  small 0.10/h → 0.30/h"], lines
    made = {"per_hour": 0.3, "before_per_hour": 0, "per_node": {}, "unknown": [], "by_hardware": {"small": 0.3}, "before_by_hardware": {}}
    print_dry_run("create", DryRun(plan={"tasks": [], "stages": []}, cost=made))
    assert "→" not in capsys.readouterr().out
