"""A job's recorded cost as a reader without `read` on some hardware types is shown it
(`muster.readmodel.priced`): those types have no price, and no figure is left from which one
could be worked out (a total, a node's price, the cost before the job)."""

from __future__ import annotations

from muster.readmodel.cost import waiting_cost
from muster.readmodel.priced import approval_shown, masked
from services.tracker.render import approval_line

# An expand of a cluster of 2 small (0.05) and 1 large (0.20) to 3 small and 1 large.
COST = {"per_hour": 0.35, "before_per_hour": 0.3, "per_node": {"s1": 0.05, "s2": 0.05, "s3": 0.05, "l1": 0.2},
        "by_hardware": {"small": 0.15, "large": 0.2}, "unknown": []}
TARGET = {"s1": "small", "s2": "small", "s3": "small", "l1": "large"}
BEFORE = ["small", "small", "large"]
LAYOUT = {"nodes": 4, "layout": [{"hardwaretype": "small", "imagetype": "i", "services": [], "count": 3},
                                 {"hardwaretype": "large", "imagetype": "i", "services": [], "count": 1}]}


def test_a_reader_of_every_type_is_shown_the_cost_as_recorded() -> None:
    assert masked(COST, lambda h: False, TARGET, BEFORE) == COST


def test_a_hidden_type_has_no_price_in_any_figure() -> None:
    shown = masked(COST, lambda h: h == "large", TARGET, BEFORE)
    assert shown["by_hardware"] == {"small": 0.15, "large": 0.0} and shown["unknown"] == ["large"]
    assert shown["per_hour"] == 0.15 and shown["before_per_hour"] == 0.1  # 2 small at 0.05: the large's 0.20 taken out
    assert shown["per_node"] == {"s1": 0.05, "s2": 0.05, "s3": 0.05, "l1": 0.0}


def test_a_readable_type_the_job_removes_whole_has_no_price_rather_than_one_worked_out_of_a_total() -> None:
    """A shrink that drops every medium node: its price is in the cost before only, beside the
    hidden large's; the total less the others' would say one of them."""
    shown = masked({**COST, "before_per_hour": 0.55}, lambda h: h == "large", TARGET, [*BEFORE, "medium", "medium"])
    assert shown["before_per_hour"] == 0.1 and shown["unknown"] == ["large", "medium"], shown


def test_a_delete_prices_nothing_it_may_not_read_before() -> None:
    cost = {"per_hour": 0.0, "before_per_hour": 0.3, "per_node": {}, "by_hardware": {}, "unknown": []}
    shown = masked(cost, lambda h: h == "large", {}, BEFORE)
    assert shown["before_per_hour"] == 0 and shown["unknown"] == ["large", "small"], shown


def test_the_approval_shows_no_price_per_type_in_words() -> None:
    """`muster status` and the console say the nodes and types, not a partial total alone."""
    approval = {"rules": ["r"], "expires_at": "2026-12-01T00:00:00+00:00", "decision": None, "layout": LAYOUT,
                "cost": COST, "cost_now": {k: v for k, v in COST.items() if k != "per_node"}}
    shown = approval_shown(approval, lambda h: h == "large", TARGET, BEFORE)
    said = waiting_cost(shown)
    assert said == ("costs 0.15/h once done at today's prices (now 0.10/h) · large 1 × no price · small 3 × 0.05/h = 0.15/h"), said
    assert "0.20" not in approval_line(shown, waiting=True) and "0.35" not in approval_line(shown, waiting=True)
    decided = approval_line({**shown, "decision": "approved", "by": "apo"}, waiting=False)
    assert decided.endswith("costs 0.15/h once done (now 0.10/h) · large 1 × no price · small 3 × 0.05/h = 0.15/h"), decided
