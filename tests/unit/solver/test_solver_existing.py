"""Changes to existing clusters: add services (coopr-facts §3.6 example 15), remove services,
expand, shrink, exclusion."""

from __future__ import annotations

import pytest
from solver_support import REACTOR_SERVICES, groups, make_catalog

from contracts.catalog import Catalog
from contracts.layout import Layout
from services.solver.domain import SolveError, SolveRequest, solve

NN, DN, RM, NM, HBM, RS, ZK, REACTOR = REACTOR_SERVICES


def layout(*rows: tuple[str, str, list[str], int]) -> Layout:
    return Layout(
        nodes=sum(r[3] for r in rows),
        layout=[{"hardwaretype": h, "imagetype": i, "services": s, "count": c} for h, i, s, c in rows],  # type: ignore[misc]
    )


# coopr-facts §3.6 example 15: 1 x (large-mem, centos6, {namenode}) + 50 x (medium, centos6, {datanode}).
HDFS = layout(("large-mem", "centos6", [NN], 1), ("medium", "centos6", [DN], 50))


def change(reactor: Catalog, existing: Layout, nodes: int | None = None, **kw: object) -> Layout:
    request = SolveRequest(template="reactor-medium", nodes=existing.nodes if nodes is None else nodes, existing=existing, **kw)  # type: ignore[arg-type]
    return solve(reactor, request)


def failure(reactor: Catalog, existing: Layout, nodes: int | None = None, **kw: object) -> SolveError:
    with pytest.raises(SolveError) as err:
        change(reactor, existing, nodes, **kw)
    return err.value


# --- add services --------------------------------------------------------------------------


def test_add_services_coopr_examples(reactor: Catalog) -> None:
    assert groups(change(reactor, HDFS, add_services=(RM,))) == [
        ("large-mem", "centos6", (NN, RM), 1),
        ("medium", "centos6", (DN,), 50),
    ]
    assert groups(change(reactor, HDFS, add_services=(RM, NM, HBM, RS))) == [
        ("large-mem", "centos6", (HBM, NN, RM), 1),
        ("medium", "centos6", (DN, NM, RS), 50),
    ]


@pytest.mark.parametrize("added", [(ZK,), (RM, NM, ZK)])
def test_add_zookeeper_cannot_be_placed(reactor: Catalog, added: tuple[str, ...]) -> None:
    err = failure(reactor, HDFS, add_services=added)
    assert err.kind == "unsolvable"
    assert err.message == "zookeeper cannot be placed: it can't coexist with namenode, datanode and add-services adds no nodes"


def test_add_service_respects_hardware_and_image_of_existing_nodes(reactor: Catalog) -> None:
    # zookeeper needs small or medium hardware and centos6: one reactor node qualifies.
    existing = layout(
        ("large-mem", "centos6", [NN, RM, HBM], 1),
        ("large-cpu", "centos6", [DN, NM, RS], 3),
        ("medium", "ubuntu12", [REACTOR], 2),
        ("medium", "centos6", [REACTOR], 1),
    )
    assert groups(change(reactor, existing, add_services=(ZK,))) == [
        ("large-cpu", "centos6", (DN, NM, RS), 3),
        ("large-mem", "centos6", (HBM, NN, RM), 1),
        ("medium", "centos6", (REACTOR, ZK), 1),
        ("medium", "ubuntu12", (REACTOR,), 2),
    ]


def test_add_service_up_to_its_max_splitting_a_group() -> None:
    catalog = make_catalog(["a", "b"], {"constraints": {"services": {"b": {"quantities": {"max": 2}}}}})
    existing = layout(("hw", "img", ["a"], 5))
    result = solve(catalog, SolveRequest(template="t", nodes=5, existing=existing, add_services=("b",)))
    assert groups(result) == [("hw", "img", ("a", "b"), 2), ("hw", "img", ("a",), 3)]


def test_added_unconstrained_service_goes_everywhere() -> None:
    catalog = make_catalog(["a", "b", "c"], {"constraints": {"layout": {"cantcoexist": [["a", "b"]]}}})
    existing = layout(("hw", "img", ["a"], 2), ("hw", "img", ["b"], 1))
    result = solve(catalog, SolveRequest(template="t", nodes=3, existing=existing, add_services=("c",)))
    assert groups(result) == [("hw", "img", ("a", "c"), 2), ("hw", "img", ("b", "c"), 1)]


def test_add_service_never_moves_other_services(reactor: Catalog) -> None:
    existing = layout(("large-mem", "centos6", [NN, RM, HBM], 1), ("large-cpu", "centos6", [DN, NM, RS], 3), ("medium", "centos6", [ZK], 2))
    result = change(reactor, existing, add_services=(REACTOR,))
    assert groups(result) == [
        ("large-cpu", "centos6", (DN, NM, RS), 3),
        ("large-mem", "centos6", (HBM, NN, RM), 1),
        ("medium", "centos6", (REACTOR, ZK), 2),
    ]


def test_add_service_already_present_is_invalid(reactor: Catalog) -> None:
    assert failure(reactor, HDFS, add_services=(NN,)).message == "already on the cluster: namenode"


def test_add_services_with_a_different_node_count_is_invalid(reactor: Catalog) -> None:
    err = failure(reactor, HDFS, nodes=52, add_services=(RM,))
    assert err.kind == "invalid"
    assert "change nodes and services in separate operations" in err.message


# --- remove services -----------------------------------------------------------------------


def full(workers: int = 3, edge: int = 1) -> Layout:
    return layout(
        ("large-cpu", "centos6", [DN, NM, RS], workers),
        ("large-mem", "centos6", [HBM, NN, RM], 1),
        ("medium", "centos6", [REACTOR, ZK], edge),
    )


def test_remove_service_takes_it_off_every_node(reactor: Catalog) -> None:
    assert groups(change(reactor, full(), remove_services=(REACTOR,))) == [
        ("large-cpu", "centos6", (DN, NM, RS), 3),
        ("large-mem", "centos6", (HBM, NN, RM), 1),
        ("medium", "centos6", (ZK,), 1),
    ]


def test_remove_service_others_require_is_invalid(reactor: Catalog) -> None:
    err = failure(reactor, full(), remove_services=(ZK,))
    assert (err.kind, err.message) == ("invalid", "cannot remove zookeeper: reactor requires it")


def test_remove_service_not_on_cluster_is_invalid(reactor: Catalog) -> None:
    assert failure(reactor, HDFS, remove_services=(ZK,)).message == "not on the cluster, cannot remove: zookeeper"


# --- expand and shrink ----------------------------------------------------------------------


def test_expand_keeps_existing_nodes_and_adds_preferred_layouts(reactor: Catalog) -> None:
    result = change(reactor, full(), nodes=9)
    assert groups(result) == [
        ("large-cpu", "centos6", (DN, NM, RS), 7),
        ("large-mem", "centos6", (HBM, NN, RM), 1),
        ("medium", "centos6", (REACTOR, ZK), 1),
    ]


def test_expand_existing_nodes_keep_their_hardware(reactor: Catalog) -> None:
    # The existing workers are on medium, new ones prefer large-cpu: both kinds stay.
    existing = layout(("medium", "centos6", [DN, NM, RS], 2), ("large-mem", "centos6", [HBM, NN, RM], 1), ("medium", "centos6", [REACTOR, ZK], 1))
    assert groups(change(reactor, existing, nodes=6)) == [
        ("large-cpu", "centos6", (DN, NM, RS), 2),
        ("large-mem", "centos6", (HBM, NN, RM), 1),
        ("medium", "centos6", (DN, NM, RS), 2),
        ("medium", "centos6", (REACTOR, ZK), 1),
    ]


def test_expand_beyond_maxima_counts_existing_nodes(reactor: Catalog) -> None:
    # The five {reactor, zookeeper} nodes use up both maxima at once: 56 nodes is the most.
    err = failure(reactor, full(workers=50, edge=5), nodes=57)
    assert err.message == (
        "datanode max 50 (50 on existing nodes) + namenode max 1 (1 on existing nodes) + reactor max 5 (5 on existing nodes)"
        " + zookeeper max 5 (5 on existing nodes) allow at most 56 nodes; 57 requested"
    )


def test_shrink_only_removes_nodes(reactor: Catalog) -> None:
    existing = full(workers=8, edge=3)
    result = change(reactor, existing, nodes=6)
    assert groups(result) == [
        ("large-cpu", "centos6", (DN, NM, RS), 4),
        ("large-mem", "centos6", (HBM, NN, RM), 1),
        ("medium", "centos6", (REACTOR, ZK), 1),
    ]


def test_shrink_below_minima_is_explained(reactor: Catalog) -> None:
    err = failure(reactor, full(), nodes=2)
    assert err.message == "datanode min 1 + namenode min 1 + zookeeper min 1 need at least 3 nodes (no node layout holds two of them); 2 requested"


def test_same_size_returns_the_cluster_as_it_is(reactor: Catalog) -> None:
    assert groups(change(reactor, full())) == groups(full())


# --- exclusion and bad input -----------------------------------------------------------------


def test_exclude_after_failed_expand_gives_another_layout(reactor: Catalog) -> None:
    first = change(reactor, full(), nodes=9)
    second = change(reactor, full(), nodes=9, exclude=(first,))
    assert second != first
    assert second.nodes == 9
    assert sum(g.count for g in second.layout if g.services == [DN, NM, RS]) == 6


def test_existing_file_that_miscounts_is_invalid(reactor: Catalog) -> None:
    bad = Layout(nodes=7, layout=full().layout)
    assert failure(reactor, bad, nodes=7).message == "the existing cluster says 7 nodes but its groups hold 5"


def test_existing_with_unknown_service_is_invalid(reactor: Catalog) -> None:
    bad = layout(("medium", "centos6", ["ghost"], 1))
    assert failure(reactor, bad).message == "the existing cluster runs unknown services: ghost"


# --- a cluster outside its template's size range (the template changed after it was made) -------


def _sized(lo: int, hi: int | None) -> Catalog:
    return make_catalog(["a"], template={"constraints": {"size": {"min": lo, "max": hi}}})


def _of(n: int) -> Layout:
    return layout(("hw", "img", ["a"], n))


def _resized(catalog: Catalog, current: int, nodes: int) -> Layout:
    return solve(catalog, SolveRequest(template="t", nodes=nodes, existing=_of(current)))


def test_a_cluster_above_a_lowered_max_may_shrink_one_step_at_a_time() -> None:
    catalog = _sized(1, 3)  # the cluster has 6
    assert [_resized(catalog, 6, n).nodes for n in (5, 4, 3, 1)] == [5, 4, 3, 1]


def test_a_cluster_under_a_raised_min_may_grow_one_step_at_a_time() -> None:
    catalog = _sized(5, 8)  # the cluster has 2
    assert [_resized(catalog, 2, n).nodes for n in (3, 4, 5, 8)] == [3, 4, 5, 8]


@pytest.mark.parametrize(("lo", "hi", "current", "nodes", "way"), [
    (1, 3, 6, 7, "shrink toward"),  # above the max: growing moves away
    (5, 8, 2, 1, "grow toward"),  # under the min: shrinking moves away
    (3, 5, 7, 2, "shrink toward"),  # past the range: outside it on the other side
    (3, 5, 2, 9, "grow toward"),
])
def test_a_change_away_from_the_range_is_still_refused(lo: int, hi: int, current: int, nodes: int, way: str) -> None:
    with pytest.raises(SolveError) as err:
        _resized(_sized(lo, hi), current, nodes)
    assert err.value.kind == "unsolvable" and err.value.message == (
        f"template 't' allows {lo} to {hi} nodes (its size constraint); {nodes} requested; the cluster has {current}, outside "
        f"that range already (the template changed since): it may only {way} it")


def test_a_cluster_inside_the_range_is_held_to_it() -> None:
    with pytest.raises(SolveError) as err:
        _resized(_sized(2, 3), 3, 1)
    assert err.value.message == "template 't' allows 2 to 3 nodes (its size constraint); 1 requested"


def test_services_change_on_a_cluster_outside_the_range() -> None:
    catalog = make_catalog(["a", "b"], template={"constraints": {"size": {"min": 1, "max": 3}}, "defaults": {"services": ["a"]}})
    added = solve(catalog, SolveRequest(template="t", nodes=6, existing=_of(6), add_services=("b",)))
    assert added.nodes == 6 and all("b" in g.services for g in added.layout)
