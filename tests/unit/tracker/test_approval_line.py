"""A job's approval as `muster status` prints it: the cost at its approval when the catalog's
prices changed while it waited (decision 42); while it waits, the cost at today's prices its
planner gave, or the request's, said to be that."""

from __future__ import annotations

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
