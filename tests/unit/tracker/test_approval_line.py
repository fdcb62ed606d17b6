"""A decided job's approval as `muster status` prints it: the cost at its approval when the
catalog's prices changed while it waited (decision 42)."""

from __future__ import annotations

from services.tracker.render import approval_line

ASKED = {"rules": ["creates"], "decision": "approved", "by": "apo", "comment": "", "cost": {"per_hour": 0.1, "before_per_hour": 0}}


def test_an_approval_at_other_prices_shows_both_costs() -> None:
    line = approval_line({**ASKED, "approved_cost": {"per_hour": 0.2, "before_per_hour": 0}}, waiting=False)
    assert line == "approval: approved by apo (rules creates); costs 0.10/h once done (now 0.00/h); 0.20/h at the prices of its approval"


def test_an_approval_at_the_same_prices_says_it_once() -> None:
    line = approval_line({**ASKED, "approved_cost": {"per_hour": 0.1, "before_per_hour": 0}}, waiting=False)
    assert line == "approval: approved by apo (rules creates); costs 0.10/h once done (now 0.00/h)"
