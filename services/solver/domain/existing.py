"""Changes to a running cluster. The existing nodes are constraints: their hardware and image
never change, and services not named by the operation never move.

- expand (more nodes): existing nodes stay as they are; the new nodes get node layouts from
  stages 1-2 and counts from stage 3, with every service's limits counting the existing nodes.
- shrink (fewer nodes, or the same number): only removes nodes; stage 3 over the existing
  groups keeps as many nodes of the most preferred groups as the limits allow.
- add services: no node is added or removed; each existing node gets a subset of the new
  services that keeps its set valid (must-coexist sets now count the new services too) and
  suits its hardware and image; stage 3 over (group, subset) picks how many of each.
- remove services: taken off every node (then added services, if any, are placed).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from contracts.layout import Layout

from .comparators import NodeLayout
from .create import check_size, service_model, solve_create
from .errors import invalid, unsolvable
from .model import CountModel, Limit
from .node_layouts import fits, node_layouts
from .outcome import build_layout, first_allowed
from .placement import why_not_added
from .request import SolveRequest
from .service_sets import is_valid_service_set, units
from .services import check_dependencies, check_known
from .setting import Setting, names

Group = tuple[NodeLayout, int]


def solve_existing(setting: Setting, request: SolveRequest) -> Layout:
    assert request.existing is not None
    groups = _read_groups(setting, request.existing)
    if not groups and not (request.add_services or request.remove_services):
        return solve_create(setting, replace(request, existing=None))  # nothing exists yet
    old = frozenset(s for layout, _ in groups for s in layout.services)
    add, remove = frozenset(request.add_services), frozenset(request.remove_services)
    _check_change(setting, request, old, add, remove)
    cluster = (old - remove) | add
    check_dependencies(setting, cluster, remove, "add_services" if add else None)
    check_size(setting.template, request.nodes, current=request.existing.nodes)
    if add or remove:
        return _change_services(setting, request, groups, cluster, add, remove)
    if request.nodes > request.existing.nodes:
        return _expand(setting, request, groups, cluster)
    return _shrink(setting, request, groups, cluster)


def _read_groups(setting: Setting, existing: Layout) -> list[Group]:
    counted = sum(group.count for group in existing.layout)
    if counted != existing.nodes:
        raise invalid(f"the existing cluster says {existing.nodes} nodes but its groups hold {counted}")
    unknown = sorted({s for g in existing.layout for s in g.services if s not in setting.catalog.services})
    if unknown:
        raise invalid(f"the existing cluster runs unknown services: {names(unknown)}")
    return [(NodeLayout(g.hardwaretype, g.imagetype, tuple(sorted(set(g.services)))), g.count) for g in existing.layout]


def _check_change(
    setting: Setting, request: SolveRequest, old: frozenset[str], add: frozenset[str], remove: frozenset[str]
) -> None:
    if request.services is not None and frozenset(request.services) != old:
        raise invalid("to change the services of an existing cluster use add-services / remove-services", "services")
    if add & old:
        raise invalid(f"already on the cluster: {names(sorted(add & old))}", "add_services")
    if remove - old:
        raise invalid(f"not on the cluster, cannot remove: {names(sorted(remove - old))}", "remove_services")
    if add & remove:
        raise invalid(f"both added and removed: {names(sorted(add & remove))}", "add_services", "remove_services")
    check_known(setting, sorted(add), field="add_services")
    if (add or remove) and request.nodes != request.existing.nodes:  # type: ignore[union-attr]
        raise invalid(
            f"add-services/remove-services keep the node count ({request.existing.nodes}); "  # type: ignore[union-attr]
            f"{request.nodes} requested: change nodes and services in separate operations"
        )
    if remove and not (old - remove) | add:
        raise invalid("removing every service leaves nothing on the cluster", "remove_services")


def _served(groups: list[Group]) -> dict[str, int]:
    count: dict[str, int] = {}
    for layout, n in groups:
        for service in layout.services:
            count[service] = count.get(service, 0) + n
    return count


def _expand(setting: Setting, request: SolveRequest, groups: list[Group], cluster: frozenset[str]) -> Layout:
    kept = sum(n for _, n in groups)
    new = request.nodes - kept
    layouts = node_layouts(setting, cluster)
    shape = (Limit(tuple(range(len(layouts))), new, new, "exact", f"{new} new nodes"),)
    limits = service_model(setting, cluster, layouts, request.nodes, new, _served(groups), every_service=True)
    model = CountModel(len(layouts), shape, tuple(limits), total_row=0, kept_nodes=kept)

    def to_layout(counts: tuple[int, ...]) -> Layout:
        return build_layout([*groups, *zip(layouts, counts, strict=True)], setting.comparator)

    requested = f"{request.nodes} nodes ({kept} existing + {new} new)"
    return first_allowed(model, to_layout, request.exclude, requested)


def _shrink(setting: Setting, request: SolveRequest, groups: list[Group], cluster: frozenset[str]) -> Layout:
    ordered = sorted(groups, key=lambda g: (setting.comparator.key(g[0]), g[0]))
    layouts = [layout for layout, _ in ordered]
    total = Limit(tuple(range(len(layouts))), request.nodes, request.nodes, "exact", f"{request.nodes} nodes")
    caps = tuple(Limit((j,), 0, n, "exact", f"{n} existing nodes of group {j}") for j, (_, n) in enumerate(ordered))
    limits = service_model(setting, cluster, layouts, request.nodes, request.nodes, {}, every_service=True)
    model = CountModel(len(layouts), (total, *caps), tuple(limits), total_row=0, max_total=sum(n for _, n in groups))

    def to_layout(counts: tuple[int, ...]) -> Layout:
        return build_layout(zip(layouts, counts, strict=True), setting.comparator)

    return first_allowed(model, to_layout, request.exclude, f"{request.nodes} of the {sum(n for _, n in groups)} existing nodes")


def _change_services(
    setting: Setting,
    request: SolveRequest,
    groups: list[Group],
    cluster: frozenset[str],
    add: frozenset[str],
    remove: frozenset[str],
) -> Layout:
    trimmed = [
        (NodeLayout(layout.hardware, layout.image, tuple(s for s in layout.services if s not in remove)), n)
        for layout, n in groups
    ]
    options: list[tuple[NodeLayout, int]] = []  # (resulting layout, index of the group it comes from)
    for g, (layout, _) in enumerate(trimmed):
        options += [(option, g) for option in _additions(setting, layout, add, cluster)]
    for service in sorted(add):
        if not any(service in option.services for option, _ in options):
            raise unsolvable(why_not_added(setting, cluster, service, trimmed))
    stuck = [g for g in range(len(trimmed)) if not any(origin == g for _, origin in options)]
    if stuck:
        layout, n = trimmed[stuck[0]]
        raise unsolvable(
            f"the {n} node(s) with {names(layout.services)} ({layout.hardware}, {layout.image}) cannot take "
            f"the services their must-coexist sets now require ({names(sorted(add))} being added)"
        )
    options.sort(key=lambda o: (setting.comparator.key(o[0]), o[0], o[1]))
    shape = tuple(
        Limit(tuple(j for j, (_, origin) in enumerate(options) if origin == g), n, n, "exact", f"{n} nodes of group {g}")
        for g, (_, n) in enumerate(trimmed)
    )
    layouts = [option for option, _ in options]
    limits = service_model(setting, cluster, layouts, request.nodes, request.nodes, {}, every_service=True)
    model = CountModel(len(layouts), shape, tuple(limits))

    def to_layout(counts: tuple[int, ...]) -> Layout:
        return build_layout(zip(layouts, counts, strict=True), setting.comparator)

    return first_allowed(model, to_layout, request.exclude, f"the {request.nodes} existing nodes")


def _additions(setting: Setting, layout: NodeLayout, add: frozenset[str], cluster: frozenset[str]) -> Iterator[NodeLayout]:
    """The layouts an existing node of `layout` may become: its services plus a subset of
    the added ones, valid under the new cluster's constraints and suiting its hardware and
    image. Built unit by unit, dropping a branch as soon as it holds a can't-coexist set."""
    rules = setting.template.constraints.layout
    blocks = units(add, rules, cluster)
    cant = [frozenset(g) for g in rules.cantcoexist]
    base = frozenset(layout.services)

    def visit(index: int, chosen: frozenset[str]) -> Iterator[NodeLayout]:
        if index == len(blocks):
            if is_valid_service_set(chosen, rules, cluster):
                yield NodeLayout(layout.hardware, layout.image, tuple(sorted(chosen)))
            return
        grown = chosen | blocks[index]
        if not any(g <= grown for g in cant) and fits(setting, layout.hardware, layout.image, blocks[index]):
            yield from visit(index + 1, grown)
        yield from visit(index + 1, chosen)

    yield from visit(0, base)

