"""What each service of a cluster needs (`muster/catalog/needs.py`), the one rule the planner
plans with (its `DependencyResolver`) and the read model says what a repair does with
(`observed.as_repaired`): requires and uses, provided names, services off the cluster or
missing from the catalog, chains and cycles. `tests/unit/readmodel/test_drift_repairs.py` checks
its uses agree: the drift the readers show is what the repair plans."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.catalog import Service
from muster.catalog.needs import Cycle, closure, graph, runtime_needs
from services.planner.domain.dependencies import DependencyResolver, Kind
from services.planner.domain.errors import PlanError

NAMES = ["a", "b", "c", "d", "e"]
REFS = [*NAMES, "db", "ghost"]  # "db": provided by some; "ghost": nobody's


def _service(name: str, requires: list[str], uses: Sequence[str] = (), provides: Sequence[str] = ()) -> Service:
    return Service.model_validate({"name": name, "description": name, "dependencies": {
        "provides": list(provides), "runtime": {"requires": requires, "uses": list(uses)}}})


@st.composite
def catalogs(draw: Any) -> tuple[dict[str, Service], list[str]]:
    refs = st.lists(st.sampled_from(REFS), max_size=3, unique=True)
    catalog = {n: _service(n, draw(refs), draw(refs), draw(st.lists(st.sampled_from(["db", n]), max_size=2, unique=True)))
               for n in draw(st.lists(st.sampled_from(NAMES), min_size=1, unique=True))}
    on_cluster = draw(st.lists(st.sampled_from([*NAMES, "missing"]), min_size=1, unique=True))
    return catalog, on_cluster


def _reachable(direct: dict[str, frozenset[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(direct[start])
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += direct[name]
    return seen


@settings(max_examples=400, deadline=None)
@given(catalogs())
def test_the_needs_are_what_the_direct_ones_reach_and_none_where_they_go_round(case: tuple[dict[str, Service], list[str]]) -> None:
    catalog, on_cluster = case
    if not set(on_cluster) <= catalog.keys():  # a service the catalog no longer has: neither can say
        assert runtime_needs(catalog, on_cluster) is None
        with pytest.raises(PlanError, match="not in the catalog"):
            DependencyResolver(catalog, on_cluster)
        return
    direct = graph(catalog, on_cluster, "runtime")
    assert set(direct) == set(on_cluster) and all(s not in deps and deps <= set(on_cluster) for s, deps in direct.items())
    reach = {s: _reachable(direct, s) for s in direct}
    if any(s in reach[s] for s in reach):
        assert runtime_needs(catalog, on_cluster) is None
        with pytest.raises(PlanError, match="runtime dependency cycle between services"):  # the planner refuses, naming it
            DependencyResolver(catalog, on_cluster).closure(Kind.RUNTIME)
        return
    assert runtime_needs(catalog, on_cluster) == reach
    assert DependencyResolver(catalog, on_cluster).closure(Kind.RUNTIME) == reach  # the planner's, the same rule


def test_a_provided_name_a_chain_and_a_service_off_the_cluster() -> None:
    catalog = {"app": _service("app", ["db", "cache"]), "pg": _service("pg", ["zk"], provides=["db"]),
               "zk": _service("zk", []), "cache": _service("cache", [])}
    assert runtime_needs(catalog, ["app", "pg", "zk"]) == {"app": {"pg", "zk"}, "pg": {"zk"}, "zk": frozenset()}
    assert runtime_needs(catalog, ["app", "gone"]) is None  # the catalog no longer has it: no repair either


def test_a_cycle_names_its_services_in_order() -> None:
    catalog = {"a": _service("a", ["b"]), "b": _service("b", [], uses=["a"]), "c": _service("c", ["a"])}
    with pytest.raises(Cycle) as cycle:
        closure(graph(catalog, catalog, "runtime"))
    assert cycle.value.path == ["a", "b", "a"]
    with pytest.raises(PlanError, match="runtime dependency cycle between services: a -> b -> a"):
        DependencyResolver(catalog, catalog).closure(Kind.RUNTIME)
