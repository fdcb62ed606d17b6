"""A job's approval as `muster status` prints it: the cost at its approval when the catalog's
prices changed while it waited (decision 42); while it waits, the cost at today's prices its
planner gave, or the request's, said to be that."""

from __future__ import annotations

from typing import Any

from services.tracker.render import approval_line

ASKED = {"rules": ["creates"], "decision": "approved", "by": "apo", "comment": "", "cost": {"per_hour": 0.1, "before_per_hour": 0}}


def test_an_approval_at_other_prices_shows_both_costs() -> None:
    line = approval_line({**ASKED, "approved_cost": {"per_hour": 0.2, "before_per_hour": 0}}, waiting=False)
    assert line == "approval: approved by apo (rules creates); costs 0.10/h once done (now 0.00/h); 0.20/h at the prices of its approval"


def test_an_approval_at_the_same_prices_says_it_once() -> None:
    line = approval_line({**ASKED, "approved_cost": {"per_hour": 0.1, "before_per_hour": 0}}, waiting=False)
    assert line == "approval: approved by apo (rules creates); costs 0.10/h once done (now 0.00/h)"


WAITING = {"rules": ["creates"], "expires_at": "2026-12-01T00:00:00+00:00", "decision": None, "by": None, "comment": "",
           "cost": {"per_hour": 0.1, "before_per_hour": 0}}


def test_a_waiting_job_shows_its_cost_at_todays_prices_and_the_requests_when_they_moved() -> None:
    """Only the cost at the request was shown, unlabelled, until someone pressed Check first:
    an approver decided on a figure the approval would not judge (decision 42)."""
    moved = approval_line({**WAITING, "cost_now": {"per_hour": 0.2, "before_per_hour": 0}}, waiting=True, job_id="j1")
    assert moved == ("approval: waits (rules creates) until 2026-12-01 00:00:00 UTC; costs 0.20/h once done at today's prices "
                     "(now 0.00/h; 0.10/h at the prices when it was requested): `muster job approve j1` or `muster job reject j1`")
    same = approval_line({**WAITING, "cost_now": {"per_hour": 0.1, "before_per_hour": 0}}, waiting=True)
    assert "; costs 0.10/h once done at today's prices (now 0.00/h): " in same
    unknown = approval_line(WAITING, waiting=True)  # no planner answered: the log's view
    assert "; costs 0.10/h once done at the prices when it was requested (now 0.00/h; Check first, or " in unknown


def test_muster_status_says_what_a_waiting_expand_does_to_each_type_as_its_reader_may_read_it() -> None:
    """A waiting expand's cost per type before and once done (`PlanCost` v2), at today's prices
    when its planner said: to a reader without read on large, large has no price, never a figure."""
    import io

    from rich.console import Console

    from muster.readmodel.priced import approval_shown
    from services.tracker.render import print_status

    cost = {"per_hour": 0.7, "before_per_hour": 0.3, "per_node": {"s1": 0.1, "s2": 0.1, "s3": 0.1, "l1": 0.2, "l2": 0.2},
            "by_hardware": {"small": 0.3, "large": 0.4}, "before_by_hardware": {"small": 0.1, "large": 0.2}, "unknown": []}
    approval = {**WAITING, "cost": cost, "cost_now": cost}
    target = {"s1": "small", "s2": "small", "s3": "small", "l1": "large", "l2": "large"}

    def said(a: dict[str, Any]) -> list[str]:
        buf = io.StringIO()
        print_status({"id": "j1", "state": "waiting_for_approval", "operation": "expand", "cluster_id": "c1", "counts": {},
                      "tasks_total": 0, "approval": a}, Console(file=buf, width=300, soft_wrap=True))
        return [line.strip() for line in buf.getvalue().splitlines() if "→" in line or line.strip().endswith("no price")]

    assert said(approval) == ["large 0.20/h → 0.40/h", "small 0.10/h → 0.30/h"]
    hidden = approval_shown(approval, "large".__eq__, target, ["small", "large"])
    assert said(hidden) == ["large no price", "small 0.10/h → 0.30/h"]
    old = {**WAITING, "cost": {k: v for k, v in cost.items() if k != "before_by_hardware"}}  # a v1 record
    assert said(old) == []
