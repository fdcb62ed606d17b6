"""Properties on random templates: every returned layout satisfies every constraint, and on
small templates the answer is exactly what a brute force over every count vector gives (so
no valid layout is ever missed). The brute force re-implements the rules from
coopr-facts §3.1-3.4 plainly, sharing no code with the solver."""

from __future__ import annotations

import math
from collections.abc import Iterator
from fractions import Fraction
from itertools import combinations, product
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from solver_support import make_catalog

from contracts.catalog import Catalog, ClusterTemplate
from contracts.layout import Layout
from services.solver.domain import SolveError, SolveRequest, solve

HARDWARE = ["h0", "h1", "h2"]
IMAGES = ["i0", "i1"]


@st.composite
def scenarios(draw: st.DrawFn, max_services: int = 4, max_nodes: int = 6) -> tuple[Catalog, SolveRequest]:
    services = [f"s{i}" for i in range(draw(st.integers(1, max_services)))]
    subset = lambda items, lo=0: draw(st.lists(st.sampled_from(items), min_size=lo, max_size=len(items), unique=True))  # noqa: E731
    hardware = {h: ({"flavor": h} if draw(st.integers(0, 5)) else {}) | {"cost": str(draw(st.integers(1, 3)))} for h in HARDWARE}
    images = {i: {"image": i} if draw(st.integers(0, 5)) else {} for i in IMAGES}
    constraints: dict[str, Any] = {}
    for service in services:
        if draw(st.booleans()):
            lo = draw(st.integers(0, 2))
            quantities: dict[str, Any] = {"min": lo}
            if draw(st.booleans()):
                quantities["max"] = draw(st.integers(lo, 4))
            if draw(st.integers(0, 3)) == 0:
                quantities["ratio"] = {"min": draw(st.sampled_from([0, 20, 33.3])), "max": draw(st.sampled_from([50, 75, 100]))}
            constraints[service] = {"hardwaretypes": subset(HARDWARE), "imagetypes": subset(IMAGES), "quantities": quantities}
    groups = lambda: [sorted(set(subset(services, 2))) for _ in range(draw(st.integers(0, 2)))] if len(services) > 1 else []  # noqa: E731
    template = {
        "defaults": {"services": subset(services, 1), "imagetype": draw(st.sampled_from([None, *IMAGES]))},
        "compatibility": {"hardwaretypes": subset(HARDWARE), "imagetypes": subset(IMAGES)},
        "constraints": {
            "layout": {"mustcoexist": groups(), "cantcoexist": groups()},
            "services": constraints,
            "size": {"min": 1, "max": draw(st.sampled_from([None, 3, 5]))},
        },
    }
    catalog = make_catalog(services, template, hardware, images)
    comparator = draw(st.sampled_from(["default", "coopr"]))
    return catalog, SolveRequest(template="t", nodes=draw(st.integers(1, max_nodes)), comparator=comparator)


# --- the rules, written out plainly ----------------------------------------------------------


class Rules:
    def __init__(self, catalog: Catalog, request: SolveRequest) -> None:
        self.t: ClusterTemplate = catalog.clustertemplates["t"]
        self.request, self.catalog = request, catalog
        self.cluster = frozenset(self.t.defaults.services)
        grouped = {s for g in (*self.t.constraints.layout.mustcoexist, *self.t.constraints.layout.cantcoexist) for s in g}
        self.free = frozenset(s for s in self.cluster if s not in self.t.constraints.services and s not in grouped)
        coopr = request.comparator == "coopr"
        required_image = self.t.defaults.imagetype if coopr else None
        self.hardware = [h for h, e in sorted(catalog.hardwaretypes.items()) if self.t.compatibility.allows_hardware(h) and e.flavor("p")]
        self.images = [i for i, e in sorted(catalog.imagetypes.items()) if self.t.compatibility.allows_image(i) and e.image("p")]
        if required_image is not None:
            self.images = [i for i in self.images if i == required_image]
            self.image_ok = required_image in catalog.imagetypes and bool(self.images)
        else:
            self.image_ok = bool(self.images)

    def valid_set(self, services: frozenset[str]) -> bool:
        layout = self.t.constraints.layout
        if any(services >= set(g) for g in layout.cantcoexist):
            return False
        return all(not (services & (m := self.cluster & set(g))) or services >= m for g in layout.mustcoexist)

    def allows(self, service: str, hardware: str, image: str) -> bool:
        c = self.t.constraints.services.get(service)
        return c is None or ((not c.hardwaretypes or hardware in c.hardwaretypes) and (not c.imagetypes or image in c.imagetypes))

    def key(self, hw: str, img: str, services: tuple[str, ...]) -> tuple[Any, ...]:
        if self.request.comparator == "coopr":
            return (-len(services), hw, img, services)
        cost = self.catalog.hardwaretypes[hw].cost("p")
        return (-len(services), img != self.t.defaults.imagetype, math.inf if cost is None else cost, hw, img, services)

    def layouts(self) -> list[tuple[str, str, tuple[str, ...]]]:
        constrained = sorted(self.cluster - self.free)
        sets = [frozenset(c) | self.free for k in range(1, len(constrained) + 1) for c in combinations(constrained, k)]
        sets = [s for s in sets if self.valid_set(s)] + ([self.free] if self.free else [])
        found = []
        for services in sets:
            names = tuple(sorted(services))
            pairs = [(h, i) for h in self.hardware for i in self.images if all(self.allows(s, h, i) for s in services)]
            if pairs:
                found.append(min(((h, i, names) for h, i in pairs), key=lambda x: self.key(*x)))
        return sorted(found, key=lambda x: self.key(*x))

    def bounds(self, service: str, nodes: int) -> tuple[int, float]:
        q = self.t.constraints.services[service].quantities if service in self.t.constraints.services else None
        lo, hi = 1, math.inf
        if q is not None:
            lo, hi = max(lo, q.min), q.max if q.max is not None else math.inf
            if q.ratio is not None:
                lo = max(lo, math.ceil(Fraction(str(q.ratio.min or 0)) * nodes / 100))
                hi = min(hi, math.floor(Fraction(str(q.ratio.max if q.ratio.max is not None else 100)) * nodes / 100))
        return lo, hi

    def counts_ok(self, counted: dict[str, int], nodes: int) -> bool:
        return all(self.bounds(s, nodes)[0] <= counted.get(s, 0) <= self.bounds(s, nodes)[1] for s in self.cluster)


def descending(total: int, slots: int) -> Iterator[tuple[int, ...]]:
    if slots == 0:
        if total == 0:
            yield ()
        return
    for first in range(total, -1, -1):
        for rest in descending(total - first, slots - 1):
            yield (first, *rest)


def brute_force(catalog: Catalog, request: SolveRequest) -> Layout | str:
    rules = Rules(catalog, request)
    if not rules.hardware or not rules.image_ok:
        return "invalid"
    size = rules.t.constraints.size
    if request.nodes < size.min or (size.max is not None and request.nodes > size.max):
        return "unsolvable"
    layouts = rules.layouts()
    for counts in descending(request.nodes, len(layouts)):
        counted: dict[str, int] = {}
        for (_, _, services), n in zip(layouts, counts, strict=True):
            for s in services:
                counted[s] = counted.get(s, 0) + n
        if rules.counts_ok(counted, request.nodes):
            groups = [
                {"hardwaretype": h, "imagetype": i, "services": list(s), "count": n} for (h, i, s), n in zip(layouts, counts, strict=True) if n
            ]
            return Layout.model_validate({"nodes": request.nodes, "layout": groups})
    return "unsolvable"


def outcome(catalog: Catalog, request: SolveRequest) -> Layout | str:
    try:
        return solve(catalog, request)
    except SolveError as err:
        return err.kind


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_same_answer_as_brute_force(scenario: tuple[Catalog, SolveRequest]) -> None:
    catalog, request = scenario
    assert outcome(catalog, request) == brute_force(catalog, request)


# --- every answer satisfies every constraint, on bigger inputs -------------------------------


def violations(catalog: Catalog, request: SolveRequest, layout: Layout) -> list[str]:
    rules = Rules(catalog, request)
    found = []
    if sum(g.count for g in layout.layout) != request.nodes or layout.nodes != request.nodes:
        found.append("node count")
    counted: dict[str, int] = {}
    seen = set()
    for g in layout.layout:
        services = frozenset(g.services)
        key = (g.hardwaretype, g.imagetype, services)
        if key in seen or list(g.services) != sorted(services) or not services <= rules.cluster:
            found.append(f"group shape {key}")
        seen.add(key)
        if g.hardwaretype not in rules.hardware or g.imagetype not in rules.images:
            found.append(f"hardware/image {key}")
        if not rules.valid_set(services) or not rules.free <= services:
            found.append(f"service set {key}")
        if not all(rules.allows(s, g.hardwaretype, g.imagetype) for s in services):
            found.append(f"service constraint {key}")
        for s in services:
            counted[s] = counted.get(s, 0) + g.count
    if not rules.counts_ok(counted, request.nodes):
        found.append(f"counts {counted}")
    return found


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(max_services=7, max_nodes=300))
def test_every_layout_satisfies_every_constraint(scenario: tuple[Catalog, SolveRequest]) -> None:
    catalog, request = scenario
    result = outcome(catalog, request)
    if isinstance(result, Layout):
        assert violations(catalog, request, result) == []


# --- changes to existing clusters, against brute force ----------------------------------------


def _layout_of(rules: Rules, groups: list[tuple[tuple[str, str, tuple[str, ...]], int]], nodes: int) -> Layout:
    merged: dict[tuple[str, str, tuple[str, ...]], int] = {}
    for key, n in groups:
        if n:
            merged[key] = merged.get(key, 0) + n
    ordered = sorted(merged, key=lambda k: (rules.key(*k), k))
    return Layout.model_validate(
        {"nodes": nodes, "layout": [{"hardwaretype": h, "imagetype": i, "services": list(s), "count": merged[(h, i, s)]} for h, i, s in ordered]}
    )


def _counted(groups: list[tuple[tuple[str, str, tuple[str, ...]], int]]) -> dict[str, int]:
    counted: dict[str, int] = {}
    for (_, _, services), n in groups:
        for s in services:
            counted[s] = counted.get(s, 0) + n
    return counted


def _capped(caps: list[int], total: int) -> Iterator[tuple[int, ...]]:
    """Vectors with v[j] <= caps[j] summing to total, lexicographically descending."""
    if not caps:
        if total == 0:
            yield ()
        return
    for first in range(min(caps[0], total), -1, -1):
        for rest in _capped(caps[1:], total - first):
            yield (first, *rest)


def brute_force_change(catalog: Catalog, request: SolveRequest) -> Layout | str:
    assert request.existing is not None
    rules = Rules(catalog, request)
    old = [((g.hardwaretype, g.imagetype, tuple(g.services)), g.count) for g in request.existing.layout]
    rules.cluster = frozenset(s for (_, _, ss), _ in old for s in ss) - set(request.remove_services) | set(request.add_services)
    size = rules.t.constraints.size
    if request.nodes < size.min or (size.max is not None and request.nodes > size.max):
        return "unsolvable"
    ok = lambda groups: rules.counts_ok(_counted(groups), request.nodes)  # noqa: E731
    kept = request.existing.nodes
    if request.add_services or request.remove_services:
        trimmed = [((h, i, tuple(s for s in ss if s not in request.remove_services)), n) for (h, i, ss), n in old]
        add = sorted(request.add_services)
        options = []  # (resulting key, group index)
        for g, ((h, i, ss), _) in enumerate(trimmed):
            for k in range(len(add) + 1):
                for extra in combinations(add, k):
                    services = frozenset(ss) | set(extra)
                    if rules.valid_set(services) and all(rules.allows(s, h, i) for s in extra):
                        options.append(((h, i, tuple(sorted(services))), g))
        options.sort(key=lambda o: (rules.key(*o[0]), o[0], o[1]))
        per_group = [[j for j, (_, g) in enumerate(options) if g == group] for group in range(len(trimmed))]
        vectors = []
        for parts in product(*(list(_capped([n] * len(js), n)) for js, (_, n) in zip(per_group, trimmed, strict=True))):
            vector = [0] * len(options)
            for js, part in zip(per_group, parts, strict=True):
                for j, v in zip(js, part, strict=True):
                    vector[j] = v
            vectors.append(tuple(vector))
        for candidate in sorted(vectors, reverse=True):
            groups = [(key, n) for (key, _), n in zip(options, candidate, strict=True)]
            if ok(groups):
                return _layout_of(rules, groups, request.nodes)
        return "unsolvable"
    if request.nodes > kept:
        layouts = rules.layouts()
        for counts in descending(request.nodes - kept, len(layouts)):
            groups = old + list(zip(layouts, counts, strict=True))
            if ok(groups):
                return _layout_of(rules, groups, request.nodes)
        return "unsolvable"
    ordered = sorted(old, key=lambda o: (rules.key(*o[0]), o[0]))
    for counts in _capped([n for _, n in ordered], request.nodes):
        groups = [(key, c) for (key, _), c in zip(ordered, counts, strict=True)]
        if ok(groups):
            return _layout_of(rules, groups, request.nodes)
    return "unsolvable"


@st.composite
def changes(draw: st.DrawFn) -> tuple[Catalog, SolveRequest]:
    catalog, request = draw(scenarios(max_services=4, max_nodes=5))
    existing = outcome(catalog, request)
    if not isinstance(existing, Layout):
        return catalog, request  # nothing to change: compared as a creation
    old = {s for g in existing.layout for s in g.services}
    others = sorted(set(catalog.services) - old)
    kind = draw(st.sampled_from(["expand", "shrink", "add", "remove"]))
    nodes = existing.nodes
    add: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()
    if kind == "expand":
        nodes += draw(st.integers(1, 3))
    elif kind == "shrink":
        nodes -= draw(st.integers(0, nodes - 1))
    elif kind == "add" and others:
        add = tuple(draw(st.lists(st.sampled_from(others), min_size=1, max_size=2, unique=True)))
    elif kind == "remove" and len(old) > 1:
        remove = tuple(draw(st.lists(st.sampled_from(sorted(old)), min_size=1, max_size=len(old) - 1, unique=True)))
    fields = {"template": "t", "nodes": nodes, "comparator": request.comparator, "existing": existing}
    return catalog, SolveRequest(**fields, add_services=add, remove_services=remove)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(changes())
def test_changes_give_the_same_answer_as_brute_force(scenario: tuple[Catalog, SolveRequest]) -> None:
    catalog, request = scenario
    expected = brute_force_change(catalog, request) if request.existing is not None else brute_force(catalog, request)
    assert outcome(catalog, request) == expected
