"""The console's Approve says what the approval found changed since the request (decision 42):
a cost at other prices, a warning the policies give now. It said `approved` alone, and the
approver learnt the new cost nowhere on the page it acted from."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.commands import Accepted, DryRun
from contracts.layout import Layout, LayoutGroup
from services.tracker.ui import governance


class _Client:
    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    async def request(self, command: Any, tenant: str) -> Accepted:
        return Accepted(job_id=command.job_id, cluster_id="c", warnings=["it costs 0.30/h at the catalog's prices now (0.15/h when it was requested)"])


class _Bus:
    own = object()


async def test_the_consoles_approval_says_what_changed_since_the_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(governance, "MusterClient", _Client)
    said = await governance.send(_Bus(), None, "acme", "apo", "j1", "approve", "")  # type: ignore[arg-type]
    assert said == ("approved; it costs 0.30/h at the catalog's prices now (0.15/h when it was requested)", True)


class _Looking(_Client):
    async def request(self, command: Any, tenant: str) -> Any:
        assert command.dry_run
        return DryRun(plan={}, cost={"per_hour": 0.3}, policy={"deny": ["over budget (policy budget)"], "warn": []},
                      warnings=["it costs 0.30/h at the catalog's prices now (0.15/h when it was requested)"])


async def test_check_first_says_what_an_approval_now_would_find_and_decides_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(governance, "MusterClient", _Looking)
    said = await governance.send(_Bus(), None, "acme", "apo", "j1", "check", "")  # type: ignore[arg-type]
    assert said == ("checked, nothing decided: an approval now would be refused: over budget (policy budget); "
                    "it costs 0.30/h at the catalog's prices now (0.15/h when it was requested)", False)


class _Unpriced:
    """A Check first by an approver without `read` on the plan's hardware type."""

    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    async def request(self, command: Any, tenant: str) -> DryRun:
        layout = Layout(nodes=4, layout=[LayoutGroup(hardwaretype="small", imagetype="i", services=["base"], count=4)])
        return DryRun(plan={}, layout=layout, cost={"per_hour": 0.0, "by_hardware": {"small": 0.0}, "unknown": ["small"]},
                      policy={"deny": [], "warn": []}, warnings=[])


async def test_check_first_says_a_price_the_approver_may_not_read_has_none_not_that_the_plan_is_free(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """It said `it costs 0.00/h once done at today's prices`, where `muster job approve --dry-run`
    and `muster status` say `small 4 × no price`."""
    monkeypatch.setattr(governance, "MusterClient", _Unpriced)
    said = await governance.send(_Bus(), None, "acme", "apo", "j1", "check", "")  # type: ignore[arg-type]
    assert said == ("checked, nothing decided: the tenant's policies allow it now; "
                    "it costs 0.00/h once done at today's prices · small 4 × no price", False), said


class _Grown:
    """A Check first of an expand by an approver without `read` on large (`PlanCost` v2)."""

    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    async def request(self, command: Any, tenant: str) -> DryRun:
        cost = {"per_hour": 0.3, "before_per_hour": 0.1, "by_hardware": {"small": 0.3, "large": 0.0},
                "before_by_hardware": {"small": 0.1, "large": 0.0}, "unknown": ["large"]}
        return DryRun(plan={}, cost=cost, policy={"deny": [], "warn": []}, warnings=[])


async def test_check_first_says_what_the_change_does_to_each_type_s_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(governance, "MusterClient", _Grown)
    said, decided = await governance.send(_Bus(), None, "acme", "apo", "j1", "check", "")  # type: ignore[arg-type]
    assert said.endswith("; large no price; small 0.10/h → 0.30/h") and not decided, said
