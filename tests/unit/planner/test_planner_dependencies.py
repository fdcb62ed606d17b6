"""The dependency resolver against Coopr's ServiceDependencyResolverTest (coopr-facts §4.5)."""

from __future__ import annotations

import pytest
from planner_support import catalog, coopr_install, coopr_minimize, coopr_runtime, coopr_uses, svc

from contracts.catalog import Action, Service
from services.planner.domain.dependencies import DependencyResolver, Kind
from services.planner.domain.errors import PlanError

RUNTIME_ONLY = ("initialize", "start", "stop")


def resolver(*services: Service) -> DependencyResolver:
    cat = catalog(*services)
    return DependencyResolver(cat, cat)


def test_minimize_dependencies_keeps_only_direct_ones() -> None:
    cat = coopr_minimize()
    r = DependencyResolver(cat, cat)
    assert r.minimized(Kind.RUNTIME) == {
        "base": frozenset(),
        "s1": {"base"},
        "s2": {"s1"},
        "s3": {"s2"},
        "s4": {"base"},
        "s5": {"s3", "s4"},
    }


def test_minimize_dependencies_with_provides_substitutes_every_provider() -> None:
    r = resolver(
        svc("base"),
        svc("s1", runtime=["base"]),
        svc("s2-v1", runtime=["base", "s1"], provides=["s2"]),
        svc("s2-v2", runtime=["base", "s1"], provides=["s2"]),
        svc("s3", runtime=["base", "s1", "s2"]),
    )
    m = r.minimized(Kind.RUNTIME)
    assert m["s1"] == {"base"}
    assert m["s2-v1"] == {"s1"} and m["s2-v2"] == {"s1"}
    assert m["s3"] == {"s2-v1", "s2-v2"}


def test_depends_on_is_the_transitive_closure() -> None:
    r = resolver(
        svc("s1"),
        svc("s2", runtime=["s1"]),
        svc("s3", runtime=["s1"]),
        svc("s4", runtime=["s3", "s2"]),
        svc("s5", runtime=["s3"]),
        svc("s6", runtime=["s4"]),
        svc("s7", runtime=["s4"]),
    )
    closure = r.closure(Kind.RUNTIME)
    assert closure["s4"] == {"s1", "s2", "s3"}
    assert closure["s6"] == closure["s7"] == {"s1", "s2", "s3", "s4"}
    assert closure["s5"] == {"s1", "s3"}
    assert r.closure(Kind.RUNTIME, reverse=True)["s3"] == {"s4", "s5", "s6", "s7"}


def test_cluster_runtime_dependencies_skip_services_lacking_the_action() -> None:
    cat = coopr_runtime()
    r = DependencyResolver(cat, cat)
    start = Action.START
    # rule (START, INITIALIZE) and (START, START): which services must have started first
    assert r.direct("s2", Kind.RUNTIME, start) == {"s1"}  # INIT s2 <- START s1
    assert r.direct("s3", Kind.RUNTIME, start) == {"s1"}  # START s3 <- START s1
    assert r.direct("s4", Kind.RUNTIME, start) == {"s3", "s5"}  # s1 dropped: s3 already needs it
    assert r.direct("s6", Kind.RUNTIME, start) == {"s5"}  # INIT s6 <- START s5
    assert r.direct("s1", Kind.RUNTIME, start) == frozenset()


def test_cluster_install_dependencies_search_through_services_without_install() -> None:
    cat = coopr_install()
    r = DependencyResolver(cat, cat)
    inst = Action.INSTALL
    assert r.direct("s3", Kind.INSTALL, inst) == {"s1"}
    assert r.direct("s4", Kind.INSTALL, inst) == {"s3", "s5"}
    assert r.direct("s1", Kind.INSTALL, inst) == frozenset()
    assert r.direct("s5", Kind.INSTALL, inst) == frozenset()


def test_uses_orders_only_services_on_the_cluster() -> None:
    r = DependencyResolver(coopr_uses(), ["s1", "s2"])  # s3 is in the catalog, not on the cluster
    assert r.direct("s2", Kind.INSTALL, Action.INSTALL) == {"s1"}


def test_a_service_providing_its_own_name_is_ignored() -> None:
    r = resolver(svc("a", provides=["a"]), svc("b", runtime=["a"]))
    assert r.graph(Kind.RUNTIME) == {"a": frozenset(), "b": {"a"}}


def test_a_dependency_on_a_provided_name_never_points_back_at_its_provider() -> None:
    r = resolver(svc("client", runtime=["hdfs"], provides=["hdfs"]), svc("datanode", provides=["hdfs"]))
    assert r.graph(Kind.RUNTIME)["client"] == {"datanode"}


def test_install_and_runtime_graphs_are_separate() -> None:
    r = resolver(svc("a"), svc("b", install=["a"]), svc("c", runtime=["a"]))
    assert r.graph(Kind.INSTALL) == {"a": frozenset(), "b": {"a"}, "c": frozenset()}
    assert r.graph(Kind.RUNTIME) == {"a": frozenset(), "b": frozenset(), "c": {"a"}}


def test_a_cycle_is_an_error_naming_the_services() -> None:
    r = resolver(svc("x"), svc("a", runtime=["b", "x"]), svc("b", runtime=["c"]), svc("c", runtime=["a"]))
    with pytest.raises(PlanError, match=r"runtime dependency cycle between services: a -> b -> c -> a"):
        r.closure(Kind.RUNTIME)
    assert r.closure(Kind.INSTALL)["a"] == frozenset()  # the install graph has no cycle


def test_unknown_services_on_the_cluster_are_an_error() -> None:
    with pytest.raises(PlanError, match="service ghost is not in the catalog"):
        DependencyResolver(catalog(svc("a")), ["a", "ghost"])
