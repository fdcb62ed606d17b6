"""Stage 1: the sets of services that may share a node (coopr-facts §3.2).

A set is valid when it contains no whole can't-coexist set, and, for every must-coexist set
cut down to the cluster's services, it holds either all or none of it. Services with no
constraint at all are left out of the search and put on every node (Coopr's heuristic).

Coopr tries all 2^n subsets. We build sets service by service and stop a branch as soon as it
breaks a rule that adding services cannot repair (a whole can't-coexist set, a must-coexist
partner already left out, or a caller's check such as "no hardware fits all of these").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from contracts.catalog import ClusterTemplate, LayoutConstraint


def unconstrained(template: ClusterTemplate, cluster: Iterable[str]) -> frozenset[str]:
    layout = template.constraints.layout
    grouped = {s for group in (*layout.mustcoexist, *layout.cantcoexist) for s in group}
    return frozenset(s for s in cluster if s not in template.constraints.services and s not in grouped)


def is_valid_service_set(services: frozenset[str], layout: LayoutConstraint, cluster: frozenset[str]) -> bool:
    if any(services.issuperset(group) for group in layout.cantcoexist):
        return False
    for group in layout.mustcoexist:
        present = cluster.intersection(group)
        if services & present and not services >= present:
            return False
    return True


def valid_service_sets(
    services: Iterable[str],
    layout: LayoutConstraint,
    cluster: frozenset[str],
    keep: Callable[[frozenset[str]], bool] = lambda s: True,
) -> list[frozenset[str]]:
    """Every non-empty valid subset of `services` for which `keep` holds. `keep` must be
    monotone: if it rejects a set it rejects every superset."""
    order = sorted(services)
    # A can't-coexist set with a member off the cluster can never be complete on a node.
    cant = [frozenset(g) for g in layout.cantcoexist if cluster.issuperset(g)]
    must = [m for m in (cluster.intersection(g) for g in layout.mustcoexist) if len(m) > 1]
    cant_of = {s: [g - {s} for g in cant if s in g] for s in order}
    must_of = {s: [m for m in must if s in m] for s in order}
    found: list[frozenset[str]] = []
    chosen: set[str] = set()
    left_out: set[str] = set()

    def visit(index: int) -> None:
        if index == len(order):
            if chosen:
                found.append(frozenset(chosen))
            return
        service = order[index]
        if (
            not any(rest <= chosen for rest in cant_of[service])
            and not any(m & left_out for m in must_of[service])
            and keep(frozenset(chosen | {service}))
        ):
            chosen.add(service)
            visit(index + 1)
            chosen.discard(service)
        if not any(m & chosen for m in must_of[service]):
            left_out.add(service)
            visit(index + 1)
            left_out.discard(service)

    visit(0)
    return found
