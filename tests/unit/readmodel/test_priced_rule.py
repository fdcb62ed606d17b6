"""The one rule by which a plan's cost is shown to a reader (`muster.readmodel.priced.masked`),
which the planner's answers (`governance.shown_cost`: a dry run, an approval's dry run and
answer) and the tracker's (`muster status`, a job's events, the log's stream, the console) both
use (decision 42): for any plan, what a reader is shown does not change when a price it may not
read does, and a reader of every type is shown the cost whole; a cost's figures before the job
per hardware type (`before_by_hardware`, which the planner records since `JobApprovalRequested`
v2) included, and a v1 record's cost, with the total before only, shown as it was."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.approvals import PlanCost
from contracts.catalog import HardwareType
from contracts.layout import NodeSpec
from muster.readmodel.cost import type_changes
from muster.readmodel.priced import masked
from services.governance.domain.cost import plan_cost
from services.planner.governance import shown_cost

TYPES = ("small", "medium", "large", "gpu")
PRICES = st.one_of(st.none(), st.sampled_from(["0", "0.004", "0.05", "0.1", "0.125", "0.2", "1.5", "nan"]))
"""A price as the catalog writes it (None: none for the provider; `nan`: none that reads as one)."""


def catalog(prices: dict[str, str | None]) -> dict[str, HardwareType]:
    return {h: HardwareType(name=h, providermap={"sim": {"cost": p} if p is not None else {"flavor": "f"}})
            for h, p in prices.items()}


def nodes(types: list[str], first: int = 0) -> list[NodeSpec]:
    return [NodeSpec(id=f"n{first + i}", hardwaretype=t, imagetype="i", services=[]) for i, t in enumerate(types)]


@st.composite
def plans(draw: Any) -> dict[str, Any]:
    """A cluster before a job and once it is done (a node kept keeps its id), the catalog's
    prices, the types the reader may not read, and the same catalog with those types at other prices."""
    previous = draw(st.lists(st.sampled_from(TYPES), max_size=6))
    kept = draw(st.integers(0, len(previous)))
    added = draw(st.lists(st.sampled_from(TYPES), max_size=6))
    delete = draw(st.booleans()) and bool(previous)
    hidden = draw(st.sets(st.sampled_from(TYPES)))
    prices = {h: draw(PRICES) for h in TYPES}
    moved = {h: draw(PRICES) if h in hidden else p for h, p in prices.items()}
    before = nodes(previous)
    target = [] if delete else [*before[:kept], *nodes(added, first=len(previous))]
    return {"before": before, "target": target, "hidden": hidden, "prices": prices, "moved": moved, "per_type": draw(st.booleans())}


def recorded(plan: dict[str, Any], prices: dict[str, str | None]) -> dict[str, Any]:
    """The plan's cost as recorded: as the planner records it (`plan_cost`: v2, with each type's
    cost before the job, `before_by_hardware`), or as a v1 record has it (the total before only)."""
    cost = plan_cost(catalog(prices), "sim", plan["target"], plan["before"]).model_dump(mode="json")
    if not plan.get("per_type", False):
        del cost["before_by_hardware"]
    return cost


def shown(plan: dict[str, Any], prices: dict[str, str | None], hidden: set[str]) -> dict[str, Any]:
    """What the tracker shows of the recorded cost, checked to be what the planner shows (of the
    same cost as a `PlanCost`: a v1 record's reads with no figures before per type)."""
    cost = recorded(plan, prices)
    tracker = masked(cost, hidden.__contains__, {n.id: n.hardwaretype for n in plan["target"]},
                     [n.hardwaretype for n in plan["before"]])
    cluster = SimpleNamespace(nodes={n.id: n for n in plan["before"]})
    planner = shown_cost(PlanCost.model_validate(cost), hidden.__contains__, plan["target"], cluster)  # type: ignore[arg-type]
    assert planner.model_dump(mode="json", exclude=set() if "before_by_hardware" in cost else {"before_by_hardware"}) == tracker
    return tracker


@settings(max_examples=400, deadline=None)
@given(plans())
def test_nothing_a_reader_is_shown_changes_when_a_price_it_may_not_read_does(plan: dict[str, Any]) -> None:
    assert shown(plan, plan["moved"], plan["hidden"]) == shown(plan, plan["prices"], plan["hidden"])


@settings(max_examples=200, deadline=None)
@given(plans())
def test_a_reader_of_every_type_is_shown_the_whole_cost(plan: dict[str, Any]) -> None:
    assert shown(plan, plan["prices"], set()) == recorded(plan, plan["prices"])


@settings(max_examples=200, deadline=None)
@given(plans())
def test_a_hidden_type_is_said_to_have_no_price_and_a_readable_one_keeps_its_own(plan: dict[str, Any]) -> None:
    cost = recorded(plan, plan["prices"])
    seen = shown(plan, plan["prices"], plan["hidden"])
    present = {n.hardwaretype for n in [*plan["target"], *plan["before"]]}
    assert present & plan["hidden"] <= set(seen["unknown"]) and set(cost["unknown"]) <= set(seen["unknown"])
    for h, total in seen["by_hardware"].items():
        assert total == (0.0 if h in plan["hidden"] else cost["by_hardware"][h])
    assert seen["per_hour"] <= cost["per_hour"] + 1e-9 and seen["before_per_hour"] <= cost["before_per_hour"] + 1e-9
    for h, total in seen.get("before_by_hardware", {}).items():
        assert total == (0.0 if h in plan["hidden"] else cost["before_by_hardware"][h])
    if plan["per_type"] and plan["before"]:
        assert seen["before_per_hour"] == round(sum(seen["before_by_hardware"].values()), 6)
        # a readable type's before is its own figure: not said to have no price, removed whole or not
        assert not {h for h in cost["before_by_hardware"] if h not in plan["hidden"]} - set(cost["unknown"]) & set(seen["unknown"])


@settings(max_examples=200, deadline=None)
@given(plans())
def test_a_cost_per_type_says_what_the_change_does_to_each_type(plan: dict[str, Any]) -> None:
    """Before and once done, per hardware type, as the reader is shown them: a hidden type no
    price, never a figure; a cost with the total before only says nothing per type."""
    seen = shown(plan, plan["prices"], plan["hidden"])
    lines = type_changes(seen)
    if not plan["per_type"] or not plan["before"]:
        assert lines == []
    for line in lines:
        h = line.split()[0]
        assert (line == f"{h} no price") == (h in seen["unknown"])
        assert h not in plan["hidden"] or line == f"{h} no price"


def test_the_planner_and_the_tracker_show_a_shrink_that_removes_a_readable_type_whole_alike() -> None:
    """Before session 34 the planner priced the cost before the job again from the readable
    types' prices (a medium removed whole: 0.20/h, `unknown` large) where the tracker showed
    0.10/h with medium said to have no price; one rule now (`masked`), the tracker's, as the
    planner cannot record more than the tracker reads."""
    plan = {"before": nodes(["small", "small", "medium", "large"]), "target": nodes(["small", "small"])}
    seen = shown(plan, {"small": "0.05", "medium": "0.1", "large": "0.2", "gpu": None}, {"large"})
    assert seen["before_per_hour"] == 0.1 and seen["unknown"] == ["large", "medium"], seen


def test_the_planner_and_the_tracker_show_a_delete_alike() -> None:
    """A delete of a cluster with a hidden type: the planner said 0.05/h before (the readable
    small), the tracker 0.00/h with every type without a price."""
    plan = {"before": nodes(["small", "large"]), "target": []}
    seen = shown(plan, {"small": "0.05", "medium": "0.1", "large": "0.2", "gpu": None}, {"large"})
    assert seen["before_per_hour"] == 0 and seen["unknown"] == ["large", "small"] and seen["per_hour"] == 0, seen


def test_a_shrink_recorded_per_type_keeps_the_price_before_of_a_readable_type_removed_whole() -> None:
    """The shrink above with the cost before recorded per type: medium, removed whole, is
    shown its own 0.10/h before, and the total before is small's and medium's, 0.20/h (v1: no
    price for medium, 0.10/h). The hidden large's 0.20/h is in no figure."""
    plan = {"before": nodes(["small", "small", "medium", "large"]), "target": nodes(["small", "small"]), "per_type": True}
    seen = shown(plan, {"small": "0.05", "medium": "0.1", "large": "0.2", "gpu": None}, {"large"})
    assert seen["before_by_hardware"] == {"small": 0.1, "medium": 0.1, "large": 0.0}, seen
    assert seen["before_per_hour"] == 0.2 and seen["unknown"] == ["large"], seen
    assert type_changes(seen) == ["large no price", "medium 0.10/h → 0.00/h"]
