"""New clusters end to end: Coopr's worked examples, every constraint kind, validation,
explanations, determinism."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from solver_support import REACTOR_SERVICES, counts_by_services, groups, make_catalog, solve_t

from contracts.catalog import Catalog
from services.solver.domain import SolveError, SolveRequest, solve

NN, DN, RM, NM, HBM, RS, ZK, REACTOR = REACTOR_SERVICES
MASTER, WORKER, EDGE = (HBM, NN, RM), (DN, NM, RS), (REACTOR, ZK)


def reactor_solve(reactor: Catalog, nodes: int, **kw: object) -> list[tuple[str, str, tuple[str, ...], int]]:
    return groups(solve(reactor, SolveRequest(template="reactor-medium", nodes=nodes, **kw)))  # type: ignore[arg-type]


def error_of(catalog: Catalog, nodes: int, **kw: object) -> SolveError:
    with pytest.raises(SolveError) as err:
        solve_t(catalog, nodes, **kw)
    return err.value


# --- coopr-facts §3.6 ---------------------------------------------------------------------


@pytest.mark.parametrize("comparator", ["coopr", "default"])
def test_end_to_end_five_nodes(reactor: Catalog, comparator: str) -> None:
    # Example 1: 1 master node, 3 worker nodes, 1 {reactor, zookeeper} node.
    assert reactor_solve(reactor, 5, comparator=comparator) == [
        ("large-cpu", "centos6", WORKER, 3),
        ("large-mem", "centos6", MASTER, 1),
        ("medium", "centos6", EDGE, 1),
    ]


@pytest.mark.parametrize(("nodes", "workers", "edge"), [(10, 8, 1), (54, 50, 3)])
def test_more_nodes_fill_workers_up_to_their_max(reactor: Catalog, nodes: int, workers: int, edge: int) -> None:
    assert reactor_solve(reactor, nodes) == [
        ("large-cpu", "centos6", WORKER, workers),
        ("large-mem", "centos6", MASTER, 1),
        ("medium", "centos6", EDGE, edge),
    ]


def test_61_nodes_use_single_service_layouts_once_pairs_hit_their_max(reactor: Catalog) -> None:
    result = reactor_solve(reactor, 61)
    assert [(s, c) for _, _, s, c in result] == [(WORKER, 50), (MASTER, 1), ((REACTOR,), 5), ((ZK,), 5)]


def test_too_many_nodes_names_the_maxima(reactor: Catalog) -> None:
    with pytest.raises(SolveError) as err:
        reactor_solve(reactor, 62)
    assert err.value.kind == "unsolvable"
    assert err.value.message == "datanode max 50 + reactor max 5 + zookeeper max 5 + namenode max 1 allow at most 61 nodes; 62 requested"


def test_too_few_nodes_names_the_minima(reactor: Catalog) -> None:
    with pytest.raises(SolveError) as err:
        reactor_solve(reactor, 2)
    assert err.value.message == (
        "datanode min 1 + namenode min 1 + zookeeper min 1 need at least 3 nodes (no node layout holds two of them); 2 requested"
    )


def test_required_hardware_that_a_service_cannot_use(reactor: Catalog) -> None:
    with pytest.raises(SolveError) as err:
        reactor_solve(reactor, 5, hardware="small")
    assert err.value.kind == "unsolvable"
    assert err.value.message == "datanode cannot be placed on any node: it needs hardware type medium or large-cpu; small was requested"


def test_services_outside_compatibility_are_invalid(reactor: Catalog) -> None:
    with pytest.raises(SolveError) as err:
        reactor_solve(reactor, 5, services=("namenode", "mysql"))
    assert err.value.kind == "invalid"
    assert "service 'mysql' is not allowed by template 'reactor-medium'" in err.value.message


# --- quantities ---------------------------------------------------------------------------


def two_kinds(constraints: dict[str, object]) -> Catalog:
    return make_catalog(["a", "b"], {"constraints": {"layout": {"cantcoexist": [["a", "b"]]}, "services": constraints}})


def test_min_and_max() -> None:
    catalog = two_kinds({"a": {"quantities": {"max": 3}}, "b": {"quantities": {"min": 2}}})
    assert counts_by_services(solve_t(catalog, 10)) == {frozenset("a"): 3, frozenset("b"): 7}
    assert counts_by_services(solve_t(catalog, 4)) == {frozenset("a"): 2, frozenset("b"): 2}


def test_every_service_gets_at_least_one_node() -> None:
    # Coopr would give all 4 nodes to a (b has min 0); a service asked for must run somewhere.
    catalog = two_kinds({})
    assert counts_by_services(solve_t(catalog, 4)) == {frozenset("a"): 3, frozenset("b"): 1}
    assert error_of(catalog, 1).message == "a at least 1 (it is on the cluster) + b at least 1 (it is on the cluster) need at least 2 nodes (no node layout holds two of them); 1 requested"


def test_ratio_min_rounds_up_and_ratio_max_rounds_down() -> None:
    catalog = two_kinds({"a": {"quantities": {"ratio": {"max": 25}}}, "b": {"quantities": {"ratio": {"min": 30}}}})
    # 10 nodes: a at most floor(2.5) = 2, b at least ceil(3) = 3.
    assert counts_by_services(solve_t(catalog, 10)) == {frozenset("a"): 2, frozenset("b"): 8}
    catalog = two_kinds({"a": {"quantities": {"ratio": {"max": 80}}}, "b": {"quantities": {"ratio": {"min": 33.4}}}})
    # 10 nodes: b at least ceil(3.34) = 4, so a gets 6 although it may have 8.
    assert counts_by_services(solve_t(catalog, 10)) == {frozenset("a"): 6, frozenset("b"): 4}


def test_ratio_that_rounds_to_nothing_is_explained() -> None:
    catalog = two_kinds({"a": {"quantities": {"ratio": {"max": 10}}}})
    assert error_of(catalog, 5).message == "a at least 1 (it is on the cluster), but a ratio max 10% (= 0 of 5 nodes)"


def test_ratio_against_min_is_explained_with_numbers() -> None:
    catalog = two_kinds({"a": {"quantities": {"min": 3}}, "b": {"quantities": {"ratio": {"min": 80}}}})
    assert error_of(catalog, 10).message == "no layout of 10 nodes satisfies all of: a min 3; b ratio min 80% (= 8 of 10 nodes)"


def test_size_constraint() -> None:
    catalog = make_catalog(["a"], {"constraints": {"size": {"min": 3, "max": 5}}})
    assert error_of(catalog, 6).message == "template 't' allows 3 to 5 nodes (its size constraint); 6 requested"
    assert error_of(catalog, 2).kind == "unsolvable"
    assert solve_t(catalog, 4).nodes == 4


def test_negative_node_count_is_invalid() -> None:
    assert error_of(make_catalog(["a"]), -1).kind == "invalid"


def test_must_coexist_that_can_never_hold_is_explained() -> None:
    catalog = make_catalog(
        ["a", "b", "c"], {"constraints": {"layout": {"mustcoexist": [["a", "b"], ["b", "c"]], "cantcoexist": [["a", "c"]]}}}
    )
    assert error_of(catalog, 3).message == "a cannot be placed on any node: it must coexist with b, c, but a, c can't coexist"


def test_must_coexist_partners_with_disjoint_hardware_are_explained() -> None:
    catalog = make_catalog(
        ["a", "b"],
        {"constraints": {"layout": {"mustcoexist": [["a", "b"]]}, "services": {"a": {"hardwaretypes": ["h1"]}, "b": {"hardwaretypes": ["h2"]}}}},
        hardware={"h1": {"flavor": "1"}, "h2": {"flavor": "2"}},
    )
    assert error_of(catalog, 1).message == (
        "a cannot be placed on any node: it must coexist with b, and no hardware type suits them all (a needs h1; b needs h2)"
    )


# --- dependencies (coopr-facts §3.1) ---------------------------------------------------------


def deps_catalog() -> Catalog:
    return make_catalog(
        {
            "db": {"dependencies": {"provides": ["database"]}},
            "app": {"dependencies": {"runtime": {"requires": ["database"]}}},
            "web": {"dependencies": {"install": {"requires": ["app"]}, "conflicts": ["legacy"]}},
            "legacy": {},
            "cache": {"dependencies": {"runtime": {"uses": ["redis"]}}},
        },
        {"defaults": {"services": ["db"]}},
    )


def test_requires_met_by_a_service_or_by_what_one_provides() -> None:
    assert solve_t(deps_catalog(), 1, services=("db", "app", "web")).nodes == 1


def test_uses_does_not_force_a_dependency() -> None:
    assert solve_t(deps_catalog(), 1, services=("cache",)).nodes == 1


@pytest.mark.parametrize(
    ("services", "message"),
    [
        (("app",), "app requires database, which no service on the cluster is or provides"),
        (("db", "app", "web", "legacy"), "web conflicts with legacy"),
        (("db", "nope"), "unknown service 'nope'"),
    ],
)
def test_dependency_problems_are_invalid(services: tuple[str, ...], message: str) -> None:
    err = error_of(deps_catalog(), 1, services=services)
    assert (err.kind, err.message) == ("invalid", message)


def test_unknown_template_is_invalid() -> None:
    err = error_of(make_catalog(["a"]), 1, template="missing")
    assert (err.kind, err.message) == ("invalid", "unknown cluster template 'missing'")


# --- exclusion and determinism ---------------------------------------------------------------


def test_excluding_a_layout_gives_the_next_one(reactor: Catalog) -> None:
    first = solve(reactor, SolveRequest(template="reactor-medium", nodes=5))
    second = solve(reactor, SolveRequest(template="reactor-medium", nodes=5, exclude=(first,)))
    third = solve(reactor, SolveRequest(template="reactor-medium", nodes=5, exclude=(first, second)))
    assert [g.count for g in second.layout] == [2, 1, 2]
    assert len({first.model_dump_json(), second.model_dump_json(), third.model_dump_json()}) == 3


def test_excluding_the_only_layout_says_so() -> None:
    catalog = make_catalog(["a"])
    only = solve_t(catalog, 3)
    assert error_of(catalog, 3, exclude=(only,)).message == "the only layout that satisfies the constraints for 3 nodes was excluded"


_SCRIPT = """
import json, sys
from muster.catalog.files import load_catalog
from services.solver.domain import SolveRequest, solve
catalog = load_catalog(sys.argv[1])
out = [solve(catalog, SolveRequest(template="reactor-medium", nodes=n)).model_dump_json() for n in (5, 33, 61)]
print(json.dumps(out))
"""


def test_same_input_same_bytes_across_processes(reactor: Catalog) -> None:
    from solver_support import REACTOR_DIR

    outputs = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run([sys.executable, "-c", _SCRIPT, str(REACTOR_DIR)], capture_output=True, text=True, env=env, check=True, cwd=Path(__file__).parents[3])
        outputs.add(run.stdout)
    assert len(outputs) == 1
    here = [solve(reactor, SolveRequest(template="reactor-medium", nodes=n)).model_dump_json() for n in (5, 33, 61)]
    assert json.loads(outputs.pop()) == here
