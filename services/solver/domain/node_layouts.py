"""Stage 2: node layouts (coopr-facts §3.3). A service set may run on the hardware and image
types every one of its services allows; of those, the comparator's favourite is kept, one
layout per service set, and the layouts are sorted by the same comparator: that order is the
preference order of stage 3."""

from __future__ import annotations

from collections.abc import Iterable

from .comparators import NodeLayout
from .service_sets import unconstrained, valid_service_sets
from .setting import Setting


def allowed_hardware(setting: Setting, services: Iterable[str], among: Iterable[str] | None = None) -> list[str]:
    constraints = setting.template.constraints.services
    allowed = list(setting.hardware if among is None else among)
    for service in services:
        wanted = constraints[service].hardwaretypes if service in constraints else []
        if wanted:
            allowed = [h for h in allowed if h in wanted]
    return allowed


def allowed_images(setting: Setting, services: Iterable[str], among: Iterable[str] | None = None) -> list[str]:
    constraints = setting.template.constraints.services
    allowed = list(setting.images if among is None else among)
    for service in services:
        wanted = constraints[service].imagetypes if service in constraints else []
        if wanted:
            allowed = [i for i in allowed if i in wanted]
    return allowed


def fits(setting: Setting, hardware: str, image: str, services: Iterable[str]) -> bool:
    services = list(services)
    return bool(allowed_hardware(setting, services, [hardware]) and allowed_images(setting, services, [image]))


def best_layout(setting: Setting, services: frozenset[str]) -> NodeLayout | None:
    hardware = allowed_hardware(setting, services)
    images = allowed_images(setting, services)
    if not hardware or not images:
        return None
    comparator = setting.comparator
    return NodeLayout(comparator.best_hardware(hardware), comparator.best_image(images), tuple(sorted(services)))


def node_layouts(setting: Setting, cluster: frozenset[str]) -> list[NodeLayout]:
    """Stages 1 and 2: one layout per valid service set, in preference order."""
    free = unconstrained(setting.template, cluster)

    def placeable(services: frozenset[str]) -> bool:
        # Monotone: a set no hardware or image fits stays unfit with more services.
        return bool(allowed_hardware(setting, services) and allowed_images(setting, services))

    sets = [s | free for s in valid_service_sets(cluster - free, setting.template.constraints.layout, cluster, placeable)]
    if free:
        sets.append(free)
    layouts = [layout for layout in (best_layout(setting, s) for s in sets) if layout is not None]
    return sorted(layouts, key=setting.comparator.key)
