"""Stages 1 and 2: valid service sets, node layouts, comparators (coopr-facts §3.2-3.3)."""

from __future__ import annotations

from itertools import combinations

import pytest
from solver_support import REACTOR_SERVICES, make_catalog

from contracts.catalog import Catalog, LayoutConstraint
from services.solver.domain import SolveError, SolveRequest
from services.solver.domain.comparators import NodeLayout
from services.solver.domain.node_layouts import node_layouts
from services.solver.domain.service_sets import is_valid_service_set, unconstrained, units, valid_service_sets
from services.solver.domain.setting import resolve_setting

NN, DN, RM, NM, HBM, RS, ZK, REACTOR = REACTOR_SERVICES


def reactor_layout(reactor: Catalog) -> LayoutConstraint:
    return reactor.clustertemplates["reactor-medium"].constraints.layout


# --- stage 1 ----------------------------------------------------------------------------

# coopr-facts §3.6 example 9: resourcemanager is not on the cluster, so it is pruned.
CLUSTER_9 = frozenset({NN, DN, RS, NM, HBM, REACTOR, ZK})


@pytest.mark.parametrize("services", [{DN, RS, NM}, {NN, RM, HBM}, {REACTOR, ZK}, {REACTOR}, {ZK}])
def test_valid_service_sets_of_coopr_example(reactor: Catalog, services: set[str]) -> None:
    assert is_valid_service_set(frozenset(services), reactor_layout(reactor), CLUSTER_9)


@pytest.mark.parametrize("services", [{DN}, {DN, NM}, {NN}, {NN, RM}, {NN, DN}, {REACTOR, DN}, {ZK, DN}])
def test_invalid_service_sets_of_coopr_example(reactor: Catalog, services: set[str]) -> None:
    assert not is_valid_service_set(frozenset(services), reactor_layout(reactor), CLUSTER_9)


def test_must_coexist_members_off_the_cluster_are_dropped() -> None:
    rules = LayoutConstraint(mustcoexist=[["a", "b", "c"]])
    assert is_valid_service_set(frozenset({"a", "b"}), rules, frozenset({"a", "b"}))
    assert not is_valid_service_set(frozenset({"a", "b"}), rules, frozenset({"a", "b", "c"}))


def test_cant_coexist_forbids_only_the_whole_set() -> None:
    rules = LayoutConstraint(cantcoexist=[["a", "b", "c"]])
    cluster = frozenset("abc")
    assert is_valid_service_set(frozenset("ab"), rules, cluster)
    assert not is_valid_service_set(frozenset("abc"), rules, cluster)


def test_overlapping_must_coexist_sets_form_one_unit() -> None:
    rules = LayoutConstraint(mustcoexist=[["a", "b"], ["b", "c"], ["x", "y"]])
    assert units(["a", "b", "c", "d", "x"], rules, frozenset("abcdx")) == [frozenset("abc"), frozenset("d"), frozenset("x")]


def test_enumeration_finds_exactly_the_valid_subsets(reactor: Catalog) -> None:
    rules = reactor_layout(reactor)
    services = sorted(CLUSTER_9)
    expected = {
        frozenset(c)
        for k in range(1, len(services) + 1)
        for c in combinations(services, k)
        if is_valid_service_set(frozenset(c), rules, CLUSTER_9)
    }
    found = [s for s, _ in valid_service_sets(services, rules, CLUSTER_9)]
    assert len(found) == len(set(found))
    assert set(found) == expected


def test_unconstrained_services_are_those_in_no_constraint() -> None:
    catalog = make_catalog(
        ["base", "a", "b", "c"],
        {"constraints": {"layout": {"cantcoexist": [["a", "b"]]}, "services": {"c": {"quantities": {"max": 2}}}}},
    )
    assert unconstrained(catalog.clustertemplates["t"], ["base", "a", "b", "c"]) == frozenset({"base"})


# --- stage 2 ----------------------------------------------------------------------------


def layouts_for(catalog: Catalog, cluster: list[str], **request: object) -> list[NodeLayout]:
    setting = resolve_setting(catalog, SolveRequest(template=str(request.pop("template", "t")), nodes=1, **request))  # type: ignore[arg-type]
    return node_layouts(setting, frozenset(cluster))


def test_reactor_preference_list_matches_coopr(reactor: Catalog) -> None:
    # coopr-facts §3.6 example 1 (derived): no "large" hardware for joyent, medium < small.
    expected = [
        NodeLayout("large-cpu", "centos6", (DN, NM, RS)),
        NodeLayout("large-mem", "centos6", (HBM, NN, RM)),
        NodeLayout("medium", "centos6", (REACTOR, ZK)),
        NodeLayout("medium", "centos6", (REACTOR,)),
        NodeLayout("medium", "centos6", (ZK,)),
    ]
    for comparator in ("coopr", "default"):
        assert layouts_for(reactor, REACTOR_SERVICES, template="reactor-medium", comparator=comparator) == expected


def test_unconstrained_services_go_on_every_node_and_alone() -> None:
    catalog = make_catalog(["base", "a", "b"], {"constraints": {"layout": {"cantcoexist": [["a", "b"]]}}})
    found = {layout.services for layout in layouts_for(catalog, ["base", "a", "b"])}
    assert found == {("a", "base"), ("b", "base"), ("base",)}


def test_without_unconstrained_services_no_empty_node() -> None:
    catalog = make_catalog(["a", "b"], {"constraints": {"layout": {"cantcoexist": [["a", "b"]]}}})
    assert {layout.services for layout in layouts_for(catalog, ["a", "b"])} == {("a",), ("b",)}


def test_service_hardware_and_image_constraints_filter_layouts() -> None:
    catalog = make_catalog(
        ["a", "b"],
        {"constraints": {"services": {"a": {"hardwaretypes": ["big"]}, "b": {"hardwaretypes": ["small"], "imagetypes": ["u"]}}}},
        hardware={"big": {"flavor": "1"}, "small": {"flavor": "2"}},
        images={"c": {"image": "1"}, "u": {"image": "2"}},
    )
    assert layouts_for(catalog, ["a", "b"]) == [NodeLayout("big", "c", ("a",)), NodeLayout("small", "u", ("b",))]


def test_hardware_without_flavor_and_image_without_image_are_invisible() -> None:
    catalog = make_catalog(
        ["a"],
        hardware={"cheap": {"cost": "0.01"}, "ok": {"flavor": "2", "cost": "0.5"}},
        images={"a-img": {"sshuser": "x"}, "b-img": {"image": "2"}},
    )
    assert layouts_for(catalog, ["a"]) == [NodeLayout("ok", "b-img", ("a",))]


def test_template_compatibility_limits_hardware_and_images_empty_allows_all() -> None:
    hw = {"h1": {"flavor": "1"}, "h2": {"flavor": "2"}}
    im = {"i1": {"image": "1"}, "i2": {"image": "2"}}
    narrow = make_catalog(["a"], {"compatibility": {"hardwaretypes": ["h2"], "imagetypes": ["i2"]}}, hw, im)
    assert layouts_for(narrow, ["a"]) == [NodeLayout("h2", "i2", ("a",))]
    wide = make_catalog(["a"], {"compatibility": {"hardwaretypes": [], "imagetypes": []}}, hw, im)
    assert layouts_for(wide, ["a"]) == [NodeLayout("h1", "i1", ("a",))]


def test_requested_hardware_and_image_are_the_only_candidates() -> None:
    catalog = make_catalog(["a"], hardware={"h1": {"flavor": "1"}, "h2": {"flavor": "2"}}, images={"i1": {"image": "1"}, "i2": {"image": "2"}})
    assert layouts_for(catalog, ["a"], hardware="h2", image="i2") == [NodeLayout("h2", "i2", ("a",))]


@pytest.mark.parametrize(
    ("request_fields", "message"),
    [
        ({"hardware": "nope"}, "unknown hardware type 'nope'"),
        ({"hardware": "h2"}, "hardware type 'h2' is not allowed by template 't'"),
        ({"hardware": "h3"}, "hardware type 'h3' has no flavor for provider 'p'"),
        ({"image": "i9"}, "unknown image type 'i9'"),
        ({"provider": "q"}, "unknown provider 'q'"),
        ({"comparator": "cheapest"}, "unknown comparator 'cheapest'"),
    ],
)
def test_bad_requested_entities_are_invalid(request_fields: dict[str, str], message: str) -> None:
    catalog = make_catalog(
        ["a"], {"compatibility": {"hardwaretypes": ["h1", "h3"]}}, hardware={"h1": {"flavor": "1"}, "h2": {"flavor": "2"}, "h3": {}}
    )
    with pytest.raises(SolveError) as err:
        layouts_for(catalog, ["a"], **request_fields)
    assert err.value.kind == "invalid"
    assert message in err.value.message


def test_no_hardware_for_the_provider_is_invalid() -> None:
    catalog = make_catalog(["a"], hardware={"h1": {"cost": "1"}})
    with pytest.raises(SolveError, match="no hardware type is available: none of h1 has a flavor for provider 'p'"):
        layouts_for(catalog, ["a"])


# --- comparators ------------------------------------------------------------------------


def test_default_comparator_prefers_default_image_then_cheaper_hardware() -> None:
    catalog = make_catalog(
        ["a"],
        {"defaults": {"imagetype": "zz"}},
        hardware={"big": {"flavor": "1", "cost": "0.9"}, "cheap": {"flavor": "2", "cost": "0.1"}, "nocost": {"flavor": "3"}},
        images={"aa": {"image": "1"}, "zz": {"image": "2"}},
    )
    assert layouts_for(catalog, ["a"]) == [NodeLayout("cheap", "zz", ("a",))]
    # Coopr's order is names only, and Coopr requires the template's default image.
    assert layouts_for(catalog, ["a"], comparator="coopr") == [NodeLayout("big", "zz", ("a",))]


def test_default_comparator_orders_more_services_first_then_image_then_cost() -> None:
    catalog = make_catalog(
        ["a", "b", "c"],
        {
            "defaults": {"imagetype": "def"},
            "constraints": {
                "layout": {"cantcoexist": [["a", "b"], ["a", "c"], ["b", "c"]]},
                "services": {"a": {"imagetypes": ["other"]}, "b": {"hardwaretypes": ["dear"]}},
            },
        },
        hardware={"dear": {"flavor": "1", "cost": "2"}, "cheap": {"flavor": "2", "cost": "1"}},
        images={"def": {"image": "1"}, "other": {"image": "2"}},
    )
    assert layouts_for(catalog, ["a", "b", "c"]) == [
        NodeLayout("cheap", "def", ("c",)),
        NodeLayout("dear", "def", ("b",)),
        NodeLayout("cheap", "other", ("a",)),
    ]


def test_coopr_comparator_requires_template_default_hardware() -> None:
    catalog = make_catalog(["a"], {"defaults": {"hardwaretype": "h2"}}, hardware={"h1": {"flavor": "1"}, "h2": {"flavor": "2"}})
    assert layouts_for(catalog, ["a"], comparator="coopr") == [NodeLayout("h2", "img", ("a",))]
    assert layouts_for(catalog, ["a"]) == [NodeLayout("h1", "img", ("a",))]
