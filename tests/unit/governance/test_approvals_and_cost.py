"""Approval rules matched on fakes, who may decide, and what a plan costs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from contracts.catalog import HardwareType
from contracts.governance import ApprovalRule
from contracts.layout import Layout, LayoutGroup, NodeSpec
from muster.readmodel.cost import hardware_rates
from services.governance.domain.approvals import Request, matches, refusal, wait_for
from services.governance.domain.cost import describe, plan_cost

NOW = datetime(2026, 11, 28, 12, tzinfo=UTC)


def request(operation: str = "create", name: str = "web", nodes: int = 5, **labels: str) -> Request:
    return Request(operation, name, labels, nodes)


def test_each_condition_of_a_rule_must_hold() -> None:
    deletes = ApprovalRule(name="deletes", operations=["delete"])
    big = ApprovalRule(name="big", operations=["create", "expand"], min_nodes=20)
    prod = ApprovalRule(name="prod", labels={"env": "prod"})
    named = ApprovalRule(name="named", clusters=["prod-*"])
    anything = ApprovalRule(name="all")
    assert matches(deletes, request("delete")) and not matches(deletes, request("create"))
    assert matches(big, request("expand", nodes=20)) and not matches(big, request("create", nodes=19))
    assert not matches(big, request("delete", nodes=50))
    assert matches(prod, request("restart", env="prod")) and not matches(prod, request("restart", env="dev"))
    assert matches(named, request(name="prod-db")) and not matches(named, request(name="dev-db"))
    assert matches(anything, request("check"))


def test_the_strictest_matching_rule_bounds_the_wait_and_self_approval_needs_every_rule() -> None:
    rules = [ApprovalRule(name="b", expires_after_s=3600, allow_self_approval=True),
             ApprovalRule(name="a", operations=["delete"], expires_after_s=600)]
    wait = wait_for(rules, request("delete"), NOW)
    assert wait is not None and wait.rules == ("a", "b") and wait.expires_at == NOW + timedelta(seconds=600)
    assert not wait.allow_self_approval
    only_b = wait_for(rules, request("create"), NOW)
    assert only_b is not None and only_b.allow_self_approval
    assert wait_for([ApprovalRule(name="x", operations=["delete"])], request("create"), NOW) is None


def test_who_may_decide_beyond_the_permission() -> None:
    base = dict(waiting=True, decided_by=None, expires_at=NOW + timedelta(hours=1), allow_self=False, requester="uma", now=NOW)
    assert refusal(approving=True, approver="apo", **base) == ""  # type: ignore[arg-type]
    assert "may not approve" in refusal(approving=True, approver="uma", **base)  # type: ignore[arg-type]
    assert refusal(approving=False, approver="uma", **base) == ""  # type: ignore[arg-type]
    assert refusal(approving=True, approver="uma", **{**base, "allow_self": True}) == ""  # type: ignore[arg-type]
    assert "expired" in refusal(approving=True, approver="apo", **{**base, "now": NOW + timedelta(hours=2)})  # type: ignore[arg-type]
    assert "decided already" in refusal(approving=True, approver="apo", **{**base, "decided_by": "ada"})  # type: ignore[arg-type]
    assert "not waiting" in refusal(approving=True, approver="apo", **{**base, "waiting": False})  # type: ignore[arg-type]
    # An expired job waits no more: said as "not waiting for approval", which did not say why.
    late = refusal(approving=True, approver="apo", **{**base, "waiting": False, "now": NOW + timedelta(hours=2)})  # type: ignore[arg-type]
    assert late.startswith("the approval expired at") and late.endswith("nobody decided in time; ask again"), late
    assert "expired at 2026-11-28 13:00:00 UTC:" in late, late  # as people read times (it said ISO 8601)


def node(i: int, hardware: str) -> NodeSpec:
    return NodeSpec(id=f"n{i}", hardwaretype=hardware, imagetype="centos", services=[])


def test_a_plans_cost_comes_from_the_hardware_types_cost_fields() -> None:
    hardware = {"small": HardwareType(name="small", providermap={"sim": {"cost": "0.05"}}),
                "large": HardwareType(name="large", providermap={"sim": {"cost": 0.2}}),  # type: ignore[dict-item]
                "gpu": HardwareType(name="gpu", providermap={"other": {"cost": "9"}})}
    cost = plan_cost(hardware, "sim", [node(1, "small"), node(2, "small"), node(3, "large"), node(4, "gpu")], [node(1, "small")])
    assert cost.per_hour == 0.3 and cost.before_per_hour == 0.05
    assert cost.by_hardware == {"small": 0.1, "large": 0.2, "gpu": 0.0} and cost.per_node["n3"] == 0.2
    assert cost.unknown == ["gpu"]
    assert describe(cost) == "0.30/h for 4 nodes (was 0.05/h); no cost given for gpu"
    layout = Layout(nodes=3, layout=[LayoutGroup(hardwaretype="small", imagetype="centos", services=[], count=2),
                                     LayoutGroup(hardwaretype="large", imagetype="centos", services=[], count=1)])
    assert hardware_rates(cost.model_dump(), layout) == ["gpu no price", "large 1 × 0.20/h = 0.20/h", "small 2 × 0.05/h = 0.10/h"]


def test_muster_status_shows_a_jobs_policy_warnings_and_its_approval() -> None:
    """docs/governance.md: a policy's `warn` is "shown in the answer, `muster status`, the
    tracker and the console", and a waiting job's rules, expiry and cost are what its approver
    decides on; `muster status` printed neither (its --json had both)."""
    import io

    from rich.console import Console

    from services.tracker.render import print_status

    cost = {"per_hour": 0.375, "before_per_hour": 0.0, "per_node": {}, "by_hardware": {"small": 0.375}, "unknown": []}
    body: dict[str, Any] = {
        "id": "j1", "state": "waiting_for_approval", "operation": "create", "cluster_id": "c1", "counts": {"planned": 3},
        "tasks_total": 3, "stage": {"current": 1, "total": 3}, "requested_by": "uma",
        "policy_warnings": [{"policy": "w", "version": 1, "message": "watch the cost"}],
        "approval": {"rules": ["big"], "expires_at": "2026-11-30T03:48:01+00:00", "cost": cost, "decision": None, "by": None,
                     "comment": ""}}

    def shown(status: dict[str, Any]) -> str:
        buf = io.StringIO()
        print_status(status, Console(file=buf, width=300, soft_wrap=True))
        return buf.getvalue()

    waiting = shown(body)
    assert "policy warns: watch the cost (policy w)" in waiting
    assert ("approval: waits (rules big) until 2026-11-30 03:48:01 UTC; costs 0.375/h once done at the prices when it was "
            "requested (now 0.00/h; Check first, or `muster job approve --dry-run`, for today's): "
            "`muster job approve j1` or `muster job reject j1`") in waiting  # whole, to paste
    decided = shown({**body, "state": "succeeded", "approval": {**body["approval"], "decision": "approved", "by": "apo",
                                                                "comment": "fine"}})
    assert "approval: approved by apo: fine (rules big); costs 0.375/h once done (now 0.00/h)" in decided


def test_a_price_reads_with_the_decimals_it_needs() -> None:
    """Two decimals made a 0.004/h machine read as free (0.00/h) and 3 × 0.125 as 3 × 0.12 = 0.38."""
    from muster.readmodel.cost import rate

    assert [rate(v) for v in (0.0, 0.3, 0.05, 1.5, 0.004, 0.125, 1 / 3)] == ["0.00", "0.30", "0.05", "1.50", "0.004", "0.125", "0.333333"]
    cost = {"by_hardware": {"tiny": 0.012, "small": 0.375}}
    layout = Layout(nodes=6, layout=[LayoutGroup(hardwaretype="tiny", imagetype="centos", services=[], count=3),
                                     LayoutGroup(hardwaretype="small", imagetype="centos", services=[], count=3)])
    assert hardware_rates(cost, layout) == ["small 3 × 0.125/h = 0.375/h", "tiny 3 × 0.004/h = 0.012/h"]
