"""The read model's runtime needs (`muster/readmodel/needs.py`) are the planner's: on random
catalogs (requires, uses, provided names, services off the cluster or missing from the catalog,
cycles) it answers what `DependencyResolver.closure(RUNTIME)` answers, and None where that
raises (the read model imports none of the planner; this test does)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.catalog import Service
from muster.readmodel.needs import runtime_needs
from services.planner.domain.dependencies import DependencyResolver, Kind
from services.planner.domain.errors import PlanError

NAMES = ["a", "b", "c", "d", "e"]
REFS = [*NAMES, "db", "ghost"]  # "db": provided by some; "ghost": nobody's


def _service(name: str, requires: list[str], uses: list[str], provides: list[str]) -> Service:
    return Service.model_validate({"name": name, "description": name, "dependencies": {
        "provides": provides, "runtime": {"requires": requires, "uses": uses}}})


@st.composite
def catalogs(draw: Any) -> tuple[dict[str, Service], list[str]]:
    refs = st.lists(st.sampled_from(REFS), max_size=3, unique=True)
    catalog = {n: _service(n, draw(refs), draw(refs), draw(st.lists(st.sampled_from(["db", n]), max_size=2, unique=True)))
               for n in draw(st.lists(st.sampled_from(NAMES), min_size=1, unique=True))}
    on_cluster = draw(st.lists(st.sampled_from([*NAMES, "missing"]), min_size=1, unique=True))
    return catalog, on_cluster


@settings(max_examples=400, deadline=None)
@given(catalogs())
def test_runtime_needs_are_the_planners_runtime_closure(case: tuple[dict[str, Service], list[str]]) -> None:
    catalog, on_cluster = case
    try:
        expected: dict[str, frozenset[str]] | None = dict(DependencyResolver(catalog, on_cluster).closure(Kind.RUNTIME))
    except PlanError:
        expected = None
    assert runtime_needs(catalog, on_cluster) == expected


def test_a_provided_name_a_chain_and_a_service_off_the_cluster() -> None:
    catalog = {"app": _service("app", ["db", "cache"], [], []), "pg": _service("pg", ["zk"], [], ["db"]),
               "zk": _service("zk", [], [], []), "cache": _service("cache", [], [], [])}
    assert runtime_needs(catalog, ["app", "pg", "zk"]) == {"app": {"pg", "zk"}, "pg": {"zk"}, "zk": frozenset()}
    assert runtime_needs(catalog, ["app", "gone"]) is None  # the catalog no longer has it: no repair either
