"""What a tenant's clusters cost now (`muster cluster cost`): `muster.readmodel.cost.spend`."""

from __future__ import annotations

from contracts.catalog import HardwareType
from muster.readmodel.cost import spend

HARDWARE = {
    "small": HardwareType(name="small", providermap={"sim": {"cost": "0.05"}, "aws": {"cost": "0.10"}}),
    "gpu": HardwareType(name="gpu", providermap={"sim": {"flavor": "g"}}),  # no price
}


def test_each_cluster_at_its_providers_prices_and_the_sum() -> None:
    report = spend([("web", "c1", "sim", ["small"] * 3), ("ml", "c2", "aws", ["small", "small"])], HARDWARE)
    assert [(c["name"], c["nodes"], c["per_hour"]) for c in report["clusters"]] == [("web", 3, 0.15), ("ml", 2, 0.2)]
    assert report["clusters"][1]["by_hardware"] == {"small": {"nodes": 2, "each": 0.1, "per_hour": 0.2}}
    assert (report["nodes"], report["per_hour"], report["unknown"]) == (5, 0.35, [])


def test_a_hardware_type_without_a_price_counts_as_nothing_and_is_named() -> None:
    report = spend([("gpu", "c3", "sim", ["gpu", "small", "lost"])], HARDWARE)
    (cluster,) = report["clusters"]
    assert cluster["per_hour"] == 0.05 and cluster["unknown"] == ["gpu", "lost"]
    assert report["unknown"] == ["gpu", "lost"] and spend([], HARDWARE) == {"clusters": [], "nodes": 0, "per_hour": 0.0, "unknown": []}
