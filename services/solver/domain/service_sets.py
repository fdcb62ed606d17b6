"""Stage 1: the sets of services that may share a node (coopr-facts §3.2).

A set is valid when it contains no whole can't-coexist set, and, for every must-coexist set
cut down to the cluster's services, it holds either all or none of it. Services with no
constraint at all are left out of the search and put on every node (Coopr's heuristic).

Coopr tries all 2^n subsets. We build sets service by service, as bitmasks, and stop a branch
as soon as it breaks a rule that adding services cannot repair: a whole can't-coexist set, a
must-coexist partner already left out, or no (hardware, image) pair that suits every service
chosen so far (`fits`: per service, a bitmask of the pairs it allows).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from contracts.catalog import ClusterTemplate, LayoutConstraint

ANY = -1  # every (hardware, image) pair


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


def units(services: Iterable[str], layout: LayoutConstraint, cluster: frozenset[str]) -> list[frozenset[str]]:
    """Services that every valid set holds all or none of: must-coexist sets (cut down to the
    cluster) that share a member chain together, because a set holding one member of a
    must-coexist set holds all of it, and so all of every set overlapping it, and so on."""
    unit_of = {s: frozenset([s]) for s in services}
    for group in layout.mustcoexist:
        present = [s for s in group if s in cluster and s in unit_of]
        merged = frozenset().union(*(unit_of[s] for s in present))
        for s in merged:
            unit_of[s] = merged
    return sorted(set(unit_of.values()), key=sorted)


def valid_service_sets(
    services: Iterable[str],
    layout: LayoutConstraint,
    cluster: frozenset[str],
    fits: Mapping[str, int] | None = None,
) -> list[tuple[frozenset[str], int]]:
    """Every non-empty valid subset of `services` that some (hardware, image) pair suits,
    with the bitmask of the pairs that suit it."""
    blocks = units(services, layout, cluster)
    bit = {s: 1 << i for i, unit in enumerate(blocks) for s in unit}
    # A can't-coexist set with a member off the cluster can never be complete on a node;
    # one whose members all sit in a single unit rules that unit out.
    cant = [
        sum({bit[s] for s in group})
        for group in layout.cantcoexist
        if cluster.issuperset(group) and all(s in bit for s in group)
    ]
    cant_of = [[c & ~(1 << i) for c in cant if c >> i & 1] for i in range(len(blocks))]
    fit_of = [_fit(unit, fits) for unit in blocks]
    found: list[tuple[frozenset[str], int]] = []

    def visit(index: int, chosen: int, fit: int) -> None:
        if index == len(blocks):
            if chosen:
                found.append((frozenset().union(*(u for i, u in enumerate(blocks) if chosen >> i & 1)), fit))
            return
        narrowed = fit & fit_of[index]
        if narrowed and all(rest & chosen != rest for rest in cant_of[index]):
            visit(index + 1, chosen | 1 << index, narrowed)
        visit(index + 1, chosen, fit)

    visit(0, 0, ANY)
    return found


def _fit(unit: frozenset[str], fits: Mapping[str, int] | None) -> int:
    mask = ANY
    for service in unit:
        mask &= fits.get(service, ANY) if fits is not None else ANY
    return mask
