"""From counts to the answer: a `Layout` with groups in preference order, the first one not
excluded by the caller."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from contracts.layout import Layout, LayoutGroup

from .comparators import Comparator, NodeLayout
from .errors import unsolvable
from .explain import explain
from .model import CountModel

Canonical = tuple[tuple[str, str, tuple[str, ...], int], ...]


def build_layout(groups: Iterable[tuple[NodeLayout, int]], comparator: Comparator) -> Layout:
    """Equal node layouts are merged; groups sorted by preference, services by name."""
    merged: dict[NodeLayout, int] = {}
    for layout, count in groups:
        if count > 0:
            merged[layout] = merged.get(layout, 0) + count
    ordered = sorted(merged, key=lambda layout: (comparator.key(layout), layout))
    return Layout(
        nodes=sum(merged.values()),
        layout=[
            LayoutGroup(
                hardwaretype=layout.hardware, imagetype=layout.image, services=list(layout.services), count=merged[layout]
            )
            for layout in ordered
        ],
    )


def canonical(layout: Layout) -> Canonical:
    merged: dict[tuple[str, str, tuple[str, ...]], int] = {}
    for group in layout.layout:
        key = (group.hardwaretype, group.imagetype, tuple(sorted(group.services)))
        merged[key] = merged.get(key, 0) + group.count
    return tuple(sorted((*key, count) for key, count in merged.items()))


def first_allowed(
    model: CountModel, to_layout: Callable[[tuple[int, ...]], Layout], exclude: Iterable[Layout], requested: str
) -> Layout:
    excluded = {canonical(layout) for layout in exclude}
    skipped = 0
    for counts in model.solutions():
        layout = to_layout(counts)
        if canonical(layout) not in excluded:
            return layout
        skipped += 1
    if skipped:
        which = "the only layout" if skipped == 1 else f"all {skipped} layouts"
        verb = ("satisfies", "was") if skipped == 1 else ("satisfy", "were")
        raise unsolvable(f"{which} that {verb[0]} the constraints for {requested} {verb[1]} excluded")
    raise unsolvable(explain(model, requested))
