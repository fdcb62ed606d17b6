"""A plan's cost as one reader is shown it (pure): without the prices of the hardware types it
may not read, as `muster cluster cost` and `GET /v1/cost` show them.

The one rule for every answer that carries a plan's cost: the planner's (a dry run, an
approval's dry run and answer: `services.planner.governance.shown_cost`) and the tracker's (a waiting or approved job's
`approval.cost`, `cost_now`, `approved_cost` and its events' `cost`: `services.tracker.priced`),
so that the same reader is shown the same figures for the same plan (decision 42; until
session 34 the planner priced the plan again from the readable types, and the two disagreed).

The rule, worked from the cost as recorded and the plan's nodes alone (what the tracker has):
a hardware type the reader may not read has no price: 0 in `per_hour`, `by_hardware` and
`per_node`, listed in `unknown`; its node count and type stay (the job's layout shows them
anyway). The cost before the job per hardware type (`before_by_hardware`: `PlanCost` has it since
`JobApprovalRequested`/`JobApproved` v2) shows a hidden type's as 0 too, and its total is the sum of what is
shown. A record with the total only (a sum over the nodes the job replaces): when one of them
is of a hidden type, it is summed again from the readable types' prices in the plan once done,
and a readable type the job removes whole (its price in no other figure) is said to have no
price too, rather than be derived from a total that holds the hidden one. So nothing a reader is shown changes when a price it may not read
does (`tests/unit/readmodel/test_priced_rule.py`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

COSTS = ("cost", "cost_now", "approved_cost")
"""The approval's fields that hold a plan's cost (`contracts.approvals.PlanCost` as JSON)."""

Hidden = Callable[[str], bool]
"""Is this hardware type's price kept from the reader?"""


def masked(cost: Mapping[str, Any], hidden: Hidden, target: Mapping[str, str], previous: Sequence[str]) -> dict[str, Any]:
    """`cost` as the reader is shown it. `target`: node id -> hardware type of the cluster once
    the job is done (the nodes `per_node` prices); `previous`: the hardware types of its nodes before."""
    by_hardware: dict[str, float] = dict(cost.get("by_hardware") or {})
    before: dict[str, float] = dict(cost.get("before_by_hardware") or {})
    secret = {h for h in {*by_hardware, *before, *previous, *target.values()} if hidden(h)}
    if not secret:
        return dict(cost)
    counts = Counter(target.values())
    shown = {h: 0.0 if h in secret else v for h, v in by_hardware.items()}
    out: dict[str, Any] = {**cost, "by_hardware": shown, "per_hour": round(sum(shown.values()), 6)}
    if "per_node" in cost:  # a node the record does not place has no price either: nothing is guessed
        out["per_node"] = {n: p if target.get(n, "") in by_hardware and target[n] not in secret else 0.0
                           for n, p in cost["per_node"].items()}
    unknown = set(cost.get("unknown") or ()) | secret
    if before:  # each type's own figure before, a hidden one's none
        if secret & set(before):
            out["before_by_hardware"] = {h: 0.0 if h in secret else v for h, v in before.items()}
            out["before_per_hour"] = round(sum(out["before_by_hardware"].values()), 6)
    elif secret & set(previous):
        each = {h: v / counts[h] for h, v in shown.items() if counts[h] and h not in secret}
        unknown |= {h for h in previous if h not in each}
        out["before_per_hour"] = round(sum(each.get(h, 0.0) for h in previous), 6)
    out["unknown"] = sorted(unknown)
    return out


def approval_shown(approval: Mapping[str, Any], hidden: Hidden, target: Mapping[str, str],
                   previous: Sequence[str]) -> dict[str, Any]:
    """A job's `approval` with each of its costs `masked`."""
    return {**approval, **{k: masked(approval[k], hidden, target, previous) for k in COSTS if approval.get(k)}}
