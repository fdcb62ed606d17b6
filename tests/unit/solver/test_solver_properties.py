"""Properties on random templates: every returned layout satisfies every constraint, and on
small templates the answer is exactly what a brute force over every count vector gives (so
no valid layout is ever missed). The brute force re-implements the rules from
coopr-facts §3.1-3.4 plainly, sharing no code with the solver."""

from __future__ import annotations

import math
from collections.abc import Iterator
from fractions import Fraction
from itertools import combinations
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
        for (_, _, services), n in zip(layouts, counts):
            for s in services:
                counted[s] = counted.get(s, 0) + n
        if rules.counts_ok(counted, request.nodes):
            groups = [
                {"hardwaretype": h, "imagetype": i, "services": list(s), "count": n} for (h, i, s), n in zip(layouts, counts) if n
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
