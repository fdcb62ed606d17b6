"""Stage 2: node layouts (coopr-facts §3.3).

A service set may run on the hardware and image types every one of its services allows; of those,
the comparator's favourite is kept, one layout per service set, and the layouts are sorted by the
same comparator: that order is the preference order of stage 3.

Which (hardware, image) pairs suit a service is a bitmask over the candidate pairs, so stage 1
can drop sets no pair suits while it builds them and stage 2 reads the survivors off the mask.
"""

from __future__ import annotations

from collections.abc import Iterable

from .comparators import NodeLayout
from .service_sets import unconstrained, valid_service_sets
from .setting import Setting


def allowed_hardware(setting: Setting, services: Iterable[str], among: Iterable[str] | None = None) -> list[str]:
    return _allowed(setting, services, setting.hardware if among is None else among, "hardwaretypes")


def allowed_images(setting: Setting, services: Iterable[str], among: Iterable[str] | None = None) -> list[str]:
    return _allowed(setting, services, setting.images if among is None else among, "imagetypes")


def _allowed(setting: Setting, services: Iterable[str], among: Iterable[str], kind: str) -> list[str]:
    """The types in `among` that every service's constraint allows (an empty list allows all)."""
    constraints = setting.template.constraints.services
    allowed = list(among)
    for service in services:
        wanted: list[str] = getattr(constraints[service], kind) if service in constraints else []
        if wanted:
            allowed = [name for name in allowed if name in wanted]
    return allowed


def fits(setting: Setting, hardware: str, image: str, services: Iterable[str]) -> bool:
    services = list(services)
    return bool(allowed_hardware(setting, services, [hardware]) and allowed_images(setting, services, [image]))


class _Pairs:
    """Bit h * len(images) + i stands for (hardware[h], images[i])."""

    def __init__(self, setting: Setting) -> None:
        self.hardware, self.images = setting.hardware, setting.images
        width = len(self.images)
        self.hw_bits = [((1 << width) - 1) << (h * width) for h in range(len(self.hardware))]
        self.img_bits = [sum(1 << (h * width + i) for h in range(len(self.hardware))) for i in range(width)]

    def mask(self, hardware: Iterable[str], images: Iterable[str]) -> int:
        hw, img = set(hardware), set(images)
        rows = sum(b for h, b in zip(self.hardware, self.hw_bits, strict=True) if h in hw)
        cols = sum(b for i, b in zip(self.images, self.img_bits, strict=True) if i in img)
        return rows & cols

    def decode(self, mask: int) -> tuple[list[str], list[str]]:
        return (
            [h for h, b in zip(self.hardware, self.hw_bits, strict=True) if mask & b],
            [i for i, b in zip(self.images, self.img_bits, strict=True) if mask & b],
        )


def node_layouts(setting: Setting, cluster: frozenset[str]) -> list[NodeLayout]:
    """Stages 1 and 2: one layout per valid service set, in preference order."""
    free = unconstrained(setting.template, cluster)
    pairs = _Pairs(setting)
    suits = {s: pairs.mask(allowed_hardware(setting, [s]), allowed_images(setting, [s])) for s in cluster - free}
    found = valid_service_sets(cluster - free, setting.template.constraints.layout, cluster, suits)
    if free:
        found.append((frozenset(), pairs.mask(setting.hardware, setting.images)))
    comparator = setting.comparator
    layouts = []
    for services, mask in found:
        hardware, images = pairs.decode(mask)
        if hardware and images:
            best = comparator.best_hardware(hardware), comparator.best_image(images)
            layouts.append(NodeLayout(*best, tuple(sorted(services | free))))
    return sorted(layouts, key=comparator.key)
