"""Stage 3: the lexicographic count search (coopr-facts §3.4, §3.6 examples 2 and 4)."""

from __future__ import annotations

from itertools import product
from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from services.solver.domain import feasibility, relaxation
from services.solver.domain.counts import UNBOUNDED, Row, feasible, lex_max, solutions


def finder_rows(machines: int) -> list[Row]:
    # coopr-facts §3.6 example 2, a hand-written preference list:
    # L0 {nn, rm, hbm}, L1 {dn, nm, rs}, L2 {reactor, zk}, L3 {zk}, L4 {reactor}
    return [
        Row((0, 1, 2, 3, 4), machines, machines),
        Row((0,), 1, 1),  # namenode min 1 max 1
        Row((1,), 1, 50),  # datanode min 1 max 50
        Row((2, 3), 1, 5),  # zookeeper min 1 max 5
        Row((2, 4), 1, 5),  # reactor min 1 max 5
    ]


def test_cluster_layout_finder_examples() -> None:
    assert lex_max(5, finder_rows(5)) == (1, 3, 1, 0, 0)
    assert lex_max(5, finder_rows(10)) == (1, 8, 1, 0, 0)
    assert lex_max(5, finder_rows(54)) == (1, 50, 3, 0, 0)


def test_no_solution_returns_none() -> None:
    # coopr-facts §3.6 example 4: one layout {svc1, svc2, svc3}, svc1 max 1.
    rows = lambda n: [Row((0,), n, n), Row((0,), 0, 1)]  # noqa: E731
    assert lex_max(1, rows(2)) is None
    assert lex_max(1, rows(1)) == (1,)


def test_more_than_coopr_finds_where_greedy_start_is_far() -> None:
    # Layout 0 may take 60% but layout 1 needs 50%: x0 must drop far below its cap.
    n = 10_000
    rows = [Row((0, 1, 2), n, n), Row((0,), 0, 6000), Row((1,), 5000, UNBOUNDED), Row((1, 2), 0, 5500)]
    assert lex_max(3, rows) == (5000, 5000, 0)


def test_solutions_come_in_descending_order() -> None:
    found = list(solutions(3, [Row((0, 1, 2), 3, 3), Row((1,), 0, 1)]))
    assert found == [(3, 0, 0), (2, 1, 0), (2, 0, 1), (1, 1, 1), (1, 0, 2), (0, 1, 2), (0, 0, 3)]


def test_parity_holes_are_handled() -> None:
    # a, b, c each exactly 1001 over layouts {a,b}, {b,c}, {a,c}: the LP says yes, integers no.
    rows = [Row((0, 2), 1001, 1001), Row((0, 1), 1001, 1001), Row((1, 2), 1001, 1001), Row((0, 1, 2), 0, 5000)]
    assert not feasible(3, rows)
    assert lex_max(3, rows) is None
    rows = [Row((0, 2), 1000, 1000), Row((0, 1), 1000, 1000), Row((1, 2), 1000, 1000), Row((0, 1, 2), 0, 5000)]
    assert lex_max(3, rows) == (500, 500, 500)


# --- property: the search agrees with brute force ------------------------------------------


@st.composite
def problems(draw: st.DrawFn) -> tuple[int, int, list[Row]]:
    n = draw(st.integers(1, 5))
    total = draw(st.integers(0, 7))
    rows = [Row(tuple(range(n)), total, total)]
    for _ in range(draw(st.integers(0, 4))):
        members = tuple(sorted(draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n))))
        lo = draw(st.integers(0, 4))
        hi = draw(st.one_of(st.just(UNBOUNDED), st.integers(lo, 7)))
        rows.append(Row(members, lo, hi))
    return n, total, rows


def brute_force(n: int, total: int, rows: list[Row]) -> list[tuple[int, ...]]:
    vectors = [v for v in product(range(total + 1), repeat=n) if all(r.lo <= sum(v[j] for j in r.members) <= r.hi for r in rows)]
    return sorted(vectors, reverse=True)


@settings(max_examples=300, deadline=None)
@given(problems())
def test_every_solution_in_order_like_brute_force(problem: tuple[int, int, list[Row]]) -> None:
    n, total, rows = problem
    assert list(solutions(n, rows)) == brute_force(n, total, rows)
    assert feasible(n, rows) == bool(brute_force(n, total, rows))


@settings(max_examples=200, deadline=None)
@given(problems())
def test_hard_input_paths_are_exact_too(problem: tuple[int, int, list[Row]]) -> None:
    # The linear relaxation and cover branching only start after some search nodes; force
    # them from the first node so that small problems exercise them against brute force.
    n, total, rows = problem
    with patch.object(feasibility, "_RELAX_AFTER", 0), patch.object(feasibility, "_COVER_SHORT", 10**9):
        assert list(solutions(n, rows)) == brute_force(n, total, rows)


@settings(max_examples=300, deadline=None)
@given(problems())
def test_relaxation_never_rules_out_an_integer_solution(problem: tuple[int, int, list[Row]]) -> None:
    n, total, rows = problem
    specs = [(r.members, r.lo, r.hi) for r in rows]
    if brute_force(n, total, rows):
        assert relaxation.feasible([0] * n, [total] * n, specs)


def test_relaxation_sees_what_single_rows_do_not() -> None:
    # Three minima of 2 over pairs of three layouts, at most 2 nodes: each row alone and each
    # pair is fine, all three together need 3 nodes (sum of the rows = 2 x total >= 6).
    rows = [((0, 1), 2, 9), ((1, 2), 2, 9), ((0, 2), 2, 9), ((0, 1, 2), 2, 2)]
    assert not relaxation.feasible([0, 0, 0], [2, 2, 2], rows)
    assert relaxation.feasible([0, 0, 0], [3, 3, 3], [*rows[:3], ((0, 1, 2), 3, 3)])
