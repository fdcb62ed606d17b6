"""Preference order of node layouts. Stage 2 keeps the best (hardware, image) per service set
and stage 3 fills layouts in this order.

Both comparators rank hardware and image independently of each other once the service set is
fixed, so the best pair for a set is (best hardware, best image): stage 2 picks it in
O(candidates) instead of trying every pair.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from contracts.catalog import Catalog, ClusterTemplate


@dataclass(frozen=True, order=True)
class NodeLayout:
    hardware: str
    image: str
    services: tuple[str, ...]  # sorted


class Comparator(Protocol):
    name: str

    def key(self, layout: NodeLayout) -> tuple[object, ...]: ...

    def best_hardware(self, candidates: Iterable[str]) -> str: ...

    def best_image(self, candidates: Iterable[str]) -> str: ...


class CooprComparator:
    """Coopr's NodeLayoutComparator with the null preferences its solver passes: more
    services first, then hardware name, image name, and the sorted service names."""

    name = "coopr"

    def key(self, layout: NodeLayout) -> tuple[object, ...]:
        return (-len(layout.services), layout.hardware, layout.image, layout.services)

    def best_hardware(self, candidates: Iterable[str]) -> str:
        return min(candidates)

    def best_image(self, candidates: Iterable[str]) -> str:
        return min(candidates)


class DefaultComparator:
    """More services first; then the template's default image (so one image serves the whole
    cluster where the constraints allow); then cheaper hardware (`cost` for the provider; no
    cost sorts last); then names."""

    name = "default"

    def __init__(self, costs: dict[str, float], default_image: str | None) -> None:
        self.costs = costs
        self.default_image = default_image

    def _hardware_key(self, hardware: str) -> tuple[float, str]:
        return (self.costs.get(hardware, math.inf), hardware)

    def _image_key(self, image: str) -> tuple[bool, str]:
        return (image != self.default_image, image)

    def key(self, layout: NodeLayout) -> tuple[object, ...]:
        return (
            -len(layout.services),
            layout.image != self.default_image,
            *self._hardware_key(layout.hardware),
            layout.image,
            layout.services,
        )

    def best_hardware(self, candidates: Iterable[str]) -> str:
        return min(candidates, key=self._hardware_key)

    def best_image(self, candidates: Iterable[str]) -> str:
        return min(candidates, key=self._image_key)


COMPARATORS = ("default", "coopr")


def make_comparator(name: str, catalog: Catalog, template: ClusterTemplate, provider: str) -> Comparator:
    if name == "coopr":
        return CooprComparator()
    costs = {}
    for hw_name, hardware in catalog.hardwaretypes.items():
        cost = hardware.cost(provider)
        if cost is not None:
            costs[hw_name] = cost
    return DefaultComparator(costs, template.defaults.imagetype)
