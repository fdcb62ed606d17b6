"""A new cluster: stages 1-3 from scratch."""

from __future__ import annotations

from contracts.catalog import ClusterTemplate
from contracts.commands import MAX_CLUSTER_SIZE, too_many_nodes
from contracts.layout import Layout

from .comparators import NodeLayout
from .errors import invalid, unsolvable
from .model import CountModel, Limit, service_limits
from .node_layouts import node_layouts
from .outcome import build_layout, first_allowed
from .placement import why_unplaceable
from .quantities import lower_bound, upper_bound
from .request import SolveRequest
from .service_sets import unconstrained
from .services import requested_services
from .setting import Setting


def check_size(template: ClusterTemplate, nodes: int, current: int | None = None) -> None:
    """`current`: the node count of an existing cluster, which may be outside the range (the
    template changed after it was made): it may then move toward the range
    (`SizeConstraint.allows_change`)."""
    if nodes < 0:
        raise invalid(f"nodes: the node count must not be negative; {nodes} requested", "nodes")
    if nodes > MAX_CLUSTER_SIZE:  # (before any model: 10**19 nodes raised ValueError deep in the count search)
        raise invalid(f"nodes: {too_many_nodes(f'{nodes:,}')}", "nodes")
    size = template.constraints.size
    if current is None and size.allows(nodes) or current is not None and size.allows_change(current, nodes):
        return
    said = size.refusal(template.name, nodes)
    if current is not None and not size.allows(current):
        way = "shrink toward" if size.max is not None and current > size.max else "grow toward"
        said += f"; the cluster has {current}, outside that range already (the template changed since): it may only {way} it"
    raise unsolvable(said)


def service_model(
    setting: Setting,
    cluster: frozenset[str],
    layouts: list[NodeLayout],
    nodes: int,
    total: int,
    already: dict[str, int],
    every_service: bool = False,
) -> list[Limit]:
    """Rows for the services over `layouts` (which hold `total` nodes at most), for a cluster
    of `nodes` nodes, of which `already[s]` run service s outside `layouts`. A new cluster
    needs no rows for unconstrained services (every layout has them); existing nodes may
    not, so changes to a cluster pass `every_service`."""
    limits: list[Limit] = []
    holders: dict[str, list[int]] = {}
    for j, layout in enumerate(layouts):
        for service in layout.services:
            holders.setdefault(service, []).append(j)
    counted = cluster if every_service else cluster - unconstrained(setting.template, cluster)
    homeless = [s for s in sorted(counted) if s not in holders and already.get(s, 0) == 0]
    if homeless:
        raise unsolvable(why_unplaceable(setting, cluster, homeless))
    for service in sorted(counted):
        members = tuple(holders.get(service, ()))
        lo = lower_bound(setting.template, service, nodes)
        hi = upper_bound(setting.template, service, nodes)
        have = already.get(service, 0)
        if lo.value > hi.value:
            raise unsolvable(f"{lo.text}, but {hi.text}")
        if have > hi.value:
            raise unsolvable(f"{hi.text}, but {have} existing nodes run {service}")
        limits += service_limits(members, service, lo, hi, have, total)
    return limits


def solve_create(setting: Setting, request: SolveRequest) -> Layout:
    cluster = requested_services(setting, request.services)
    check_size(setting.template, request.nodes)
    layouts = node_layouts(setting, cluster)
    everything = tuple(range(len(layouts)))
    shape = (Limit(everything, request.nodes, request.nodes, "exact", f"{request.nodes} nodes"),)
    limits = service_model(setting, cluster, layouts, request.nodes, request.nodes, {})
    model = CountModel(len(layouts), shape, tuple(limits), total_row=0)

    def to_layout(counts: tuple[int, ...]) -> Layout:
        return build_layout(zip(layouts, counts, strict=True), setting.comparator)

    return first_allowed(model, to_layout, request.exclude, f"{request.nodes} nodes")
