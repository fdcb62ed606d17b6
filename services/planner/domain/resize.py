"""From a solved layout (groups with counts) back to nodes: which nodes are new, which go,
which gain or lose services (pure, deterministic).

The solver keeps existing nodes' hardware and image and never moves uninvolved services, so
every existing node maps onto a group of the new layout; ties go to the lowest node numbers
(kept) and the highest (removed).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from contracts.layout import Layout, LayoutGroup, NodeSpec

from .errors import PlanError


@dataclass(frozen=True)
class Change:
    nodes: tuple[NodeSpec, ...]
    """The cluster after the operation."""
    planned: tuple[str, ...]
    """The node ids the operation's tasks run on (new, removed or changed nodes)."""


Key = tuple[str, str, tuple[str, ...]]


def _key(hw: str, img: str, services: Sequence[str]) -> Key:
    return (hw, img, tuple(sorted(services)))


def layout_of(nodes: Sequence[NodeSpec]) -> Layout:
    counts = Counter(_key(n.hardwaretype, n.imagetype, n.services) for n in nodes)
    return Layout(
        nodes=len(nodes),
        layout=[LayoutGroup(hardwaretype=h, imagetype=i, services=list(s), count=c) for (h, i, s), c in sorted(counts.items())],
    )


def _ordered(nodes: Sequence[NodeSpec]) -> list[NodeSpec]:
    return sorted(nodes, key=lambda n: (n.nodenum, n.id))


def expand(current: Sequence[NodeSpec], target: Layout, make_node: NodeFactory) -> Change:
    have = Counter(_key(n.hardwaretype, n.imagetype, n.services) for n in current)
    new: list[NodeSpec] = []
    for group in target.layout:
        key = _key(group.hardwaretype, group.imagetype, group.services)
        missing = group.count - have.get(key, 0)
        have[key] = max(0, have.get(key, 0) - group.count)
        for _ in range(max(0, missing)):
            new.append(make_node(group))
    if len(current) + len(new) != target.nodes:
        raise PlanError(f"the solver's layout ({target.nodes} nodes) does not contain the {len(current)} existing nodes")
    return Change(tuple(current) + tuple(new), tuple(n.id for n in new))


def shrink(current: Sequence[NodeSpec], target: Layout) -> Change:
    keep = Counter({_key(g.hardwaretype, g.imagetype, g.services): g.count for g in target.layout})
    kept: list[NodeSpec] = []
    removed: list[str] = []
    for node in _ordered(current):
        key = _key(node.hardwaretype, node.imagetype, node.services)
        if keep.get(key, 0) > 0:
            keep[key] -= 1
            kept.append(node)
        else:
            removed.append(node.id)
    if len(kept) != target.nodes:
        raise PlanError(f"the solver's layout ({target.nodes} nodes) is not a subset of the cluster")
    return Change(tuple(n for n in current if n.id not in removed), tuple(removed))


def add_services(current: Sequence[NodeSpec], target: Layout, added: Sequence[str]) -> Change:
    """Each node goes to a target group with its hardware, image and services plus only
    added ones; nodes whose group is unchanged are preferred for the unchanged groups."""
    remaining = {i: g.count for i, g in enumerate(target.layout)}
    groups = list(enumerate(target.layout))
    chosen: dict[str, LayoutGroup] = {}
    for exact_first in (True, False):
        for node in _ordered(current):
            if node.id in chosen:
                continue
            for i, g in groups:
                extra = set(g.services) - set(node.services)
                fits = (g.hardwaretype, g.imagetype) == (node.hardwaretype, node.imagetype) and set(node.services) <= set(g.services)
                if remaining[i] > 0 and fits and extra <= set(added) and (bool(extra) != exact_first):
                    chosen[node.id] = g
                    remaining[i] -= 1
                    break
    if len(chosen) != len(current) or any(remaining.values()):
        raise PlanError("the solver's layout does not map onto the cluster's nodes")
    nodes = tuple(n.model_copy(update={"services": sorted(chosen[n.id].services)}) for n in current)
    changed = tuple(n.id for n, after in zip(current, nodes, strict=True) if set(after.services) != set(n.services))
    return Change(nodes, changed)


def remove_services(current: Sequence[NodeSpec], removed: Sequence[str]) -> Change:
    gone = set(removed)
    nodes = tuple(n.model_copy(update={"services": [s for s in n.services if s not in gone]}) for n in current)
    changed = tuple(n.id for n in current if gone & set(n.services))
    return Change(nodes, changed)


class NodeFactory:
    """Numbers new nodes after the highest existing one (Coopr starts at 1000)."""

    def __init__(self, cluster_name: str, provider: str, existing: Sequence[NodeSpec], flavors: dict[str, str], images: dict[str, tuple[str, str]]) -> None:
        self.name = cluster_name
        self.provider = provider
        self.next = max((n.nodenum for n in existing), default=999) + 1
        self.flavors = flavors
        self.images = images

    def __call__(self, group: LayoutGroup) -> NodeSpec:
        num, self.next = self.next, self.next + 1
        image, sshuser = self.images.get(group.imagetype, ("", ""))
        return NodeSpec(
            id=f"n{num}", hardwaretype=group.hardwaretype, imagetype=group.imagetype, services=list(group.services),
            hostname=f"{self.name}-{num}.local", nodenum=num, flavor=self.flavors.get(group.hardwaretype, ""),
            image=image, sshuser=sshuser,
        )
