"""The example policies (examples/policies) on inputs as admission builds them."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from contracts.approvals import PlanCost
from contracts.layout import NodeSpec
from services.governance.domain.inputs import document
from services.governance.domain.policies import compile_policy, evaluate

EXAMPLES = Path(__file__).parents[3] / "examples" / "policies"
DEMO = Path(__file__).parents[3] / "muster" / "demo" / "catalog"
WEDNESDAY = datetime(2026, 11, 25, 17, tzinfo=UTC)
FRIDAY_EVENING = datetime(2026, 11, 27, 17, tzinfo=UTC)


def nodes(n: int, hardware: str = "small", image: str = "centos7") -> list[NodeSpec]:
    return [NodeSpec(id=f"n{i}", hardwaretype=hardware, imagetype=image, services=["hdfs"]) for i in range(n)]


def doc(operation: str = "create", after: int = 5, before: int = 0, now: datetime = WEDNESDAY, tenant_nodes: int = 0,
        cluster: dict[str, Any] | None = None, per_hour: float = 0.25, before_per_hour: float = 0.0,
        tenant_per_hour: float = 0.0, **layout: str) -> dict[str, Any]:
    return document(tenant="t", operation=operation, now=now, requester="uma", role="user", request={"nodes": after},
                    cluster=cluster, before=nodes(before), after=nodes(after, **layout), actions=["create"] * after,
                    cost=PlanCost(per_hour=per_hour, before_per_hour=before_per_hour), tenant_nodes=tenant_nodes,
                    tenant_per_hour=tenant_per_hour)


def verdict(policy: str, document_: dict[str, Any]) -> tuple[list[str], list[str]]:
    compiled = compile_policy(policy, (EXAMPLES / f"{policy}.rego").read_text())
    v = evaluate([compiled], document_)
    return [d.message for d in v.denials], [w.message for w in v.warnings]


def test_every_example_compiles() -> None:
    for path in sorted(EXAMPLES.glob("*.rego")):
        compile_policy(path.stem, path.read_text())


def test_nodes_per_tenant() -> None:
    assert verdict("nodes_per_tenant", doc(after=5, tenant_nodes=10)) == ([], [])
    denied, _ = verdict("nodes_per_tenant", doc(after=15, tenant_nodes=30))
    assert denied == ["tenant t would have 45 nodes; its limit is 40"]
    assert verdict("nodes_per_tenant", doc(after=50))[0][0].startswith("a cluster has at most 20")
    assert verdict("nodes_per_tenant", doc(after=8, before=4, tenant_nodes=30))[1] == ["tenant t would have 34 of its 40 nodes"]


def test_allowed_hardware_and_images() -> None:
    assert verdict("allowed_hardware_images", doc()) == ([], [])
    denied, _ = verdict("allowed_hardware_images", doc(hardware="gpu", image="windows"))
    assert denied == ['hardware type gpu is not allowed (allowed: ["medium", "small"])',
                      'image type windows is not allowed (allowed: ["centos7", "ubuntu22"])']


def test_the_allowed_images_are_those_of_the_readmes_catalog() -> None:
    """Applied on the deployment the README starts (`muster up --catalog muster/demo/catalog`),
    the example allows the demo's images: it named `centos` and `ubuntu`, which no catalog here
    has, and denied every create (walk of session 26)."""
    images = {p.stem for p in (DEMO / "imagetypes").glob("*.json")}
    assert images == {"centos7", "ubuntu22"}
    for image in images:
        assert verdict("allowed_hardware_images", doc(image=image)) == ([], []), image


def test_freeze_window() -> None:
    assert verdict("freeze_window", doc(now=WEDNESDAY)) == ([], [])
    assert "frozen on Friday evenings" in verdict("freeze_window", doc(now=FRIDAY_EVENING))[0][0]
    assert verdict("freeze_window", doc(operation="check", now=FRIDAY_EVENING)) == ([], [])
    assert "freeze day" in verdict("freeze_window", doc(now=datetime(2026, 12, 24, 9, tzinfo=UTC)))[0][0]


@pytest.mark.parametrize(("expires", "denied"), [("2026-11-26T00:00:00+00:00", True), ("2026-11-24T00:00:00+00:00", False),
                                                  (None, False)])
def test_no_delete_of_a_cluster_whose_lease_still_runs(expires: str | None, denied: bool) -> None:
    cluster = {"id": "c", "name": "web", "lease_expires_at": expires}
    assert bool(verdict("no_delete_with_lease", doc(operation="delete", cluster=cluster))[0]) is denied
    assert verdict("no_delete_with_lease", doc(operation="expand", cluster=cluster))[0] == []


def test_max_cost() -> None:
    assert verdict("max_cost", doc(per_hour=0.5)) == ([], [])
    assert verdict("max_cost", doc(per_hour=1.5))[1] == ["this cluster would cost 1.50 an hour"]
    assert verdict("max_cost", doc(per_hour=2.5))[0] == ["this cluster would cost 2.50 an hour; the limit is 2.00"]


def test_tenant_budget() -> None:
    """The tenant's spend before the request, less this cluster's, plus this cluster's after it."""
    assert verdict("tenant_budget", doc(per_hour=1.0, tenant_per_hour=2.0)) == ([], [])
    assert verdict("tenant_budget", doc(per_hour=1.0, tenant_per_hour=4.5))[0] == [
        "tenant t would spend 5.50 an hour; its budget is 5.00"]
    assert verdict("tenant_budget", doc(per_hour=1.0, tenant_per_hour=3.5))[1] == ["tenant t would spend 4.50 of its 5.00 an hour"]
    # an expand of a cluster already counted in the tenant's spend: only the difference is new
    assert verdict("tenant_budget", doc(per_hour=2.0, before_per_hour=1.5, tenant_per_hour=4.0))[0] == []
    # over budget already, a shrink is not refused
    assert verdict("tenant_budget", doc(operation="shrink", per_hour=1.0, before_per_hour=2.0, tenant_per_hour=7.0))[0] == []


@pytest.mark.parametrize(("operation", "before", "after", "before_per_hour", "per_hour"), [
    ("check", 6, 6, 0.30, 0.30), ("stop", 6, 6, 0.30, 0.30), ("shrink", 20, 19, 4.0, 3.8), ("delete", 7, 0, 0.35, 0.0)])
def test_the_examples_warn_of_what_a_request_adds_not_of_every_request(operation: str, before: int, after: int,
                                                                        before_per_hour: float, per_hour: float) -> None:
    """Walk of session 24: with the tenant at 33 of its 40 nodes and 4.65 of its 5.00 an hour,
    every request warned `would have 33 of its 40 nodes` and `would spend 4.65 ...`: a nightly
    `check`, a stop, a shrink, the delete that brings the tenant down (each job then carried a
    PolicyWarned, and an approver read warnings about a request that spends nothing). A warning
    is for a request that adds nodes or cost, as the denials already were."""
    document_ = doc(operation=operation, before=before, after=after, tenant_nodes=33, before_per_hour=before_per_hour,
                    per_hour=per_hour, tenant_per_hour=4.65)
    assert verdict("nodes_per_tenant", document_) == ([], [])
    assert verdict("tenant_budget", document_) == ([], [])
    # a tenant over its limits (lowered since): its 25-node cluster may still be checked and shrunk
    over = doc(operation=operation, before=25, after=25 if operation in ("check", "stop") else 24, tenant_nodes=45)
    assert verdict("nodes_per_tenant", over) == ([], [])
    growing = doc(operation="expand", before=6, after=7, tenant_nodes=33, before_per_hour=0.30, per_hour=0.35, tenant_per_hour=4.65)
    assert verdict("nodes_per_tenant", growing)[1] == ["tenant t would have 34 of its 40 nodes"]
    assert verdict("tenant_budget", growing)[1] == ["tenant t would spend 4.70 of its 5.00 an hour"]
