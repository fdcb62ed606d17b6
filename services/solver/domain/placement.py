"""Why a service fits on no node layout at all: the first check after stage 2, because it
gives the most useful message (what to change in the request or the template)."""

from __future__ import annotations

from collections.abc import Sequence

from .comparators import NodeLayout
from .node_layouts import allowed_hardware, allowed_images, fits
from .setting import Setting, names


def must_closure(setting: Setting, cluster: frozenset[str], service: str) -> frozenset[str]:
    """The smallest set holding `service` that breaks no must-coexist set."""
    groups = [cluster.intersection(g) for g in setting.template.constraints.layout.mustcoexist]
    closure = {service}
    grown = True
    while grown:
        grown = False
        for group in groups:
            if group & closure and not group <= closure:
                closure |= group
                grown = True
    return frozenset(closure)


def _wanted(setting: Setting, service: str, kind: str) -> list[str]:
    constraint = setting.template.constraints.services.get(service)
    return list(getattr(constraint, kind)) if constraint is not None else []


def why_unplaceable(setting: Setting, cluster: frozenset[str], services: Sequence[str]) -> str:
    """For the first of `services` that cannot be placed for a reason of its own (hardware,
    image), else for the first one: the root cause is the more useful message."""
    reasons = [_why_unplaceable(setting, cluster, service) for service in services]
    return min(reasons, key=lambda r: "must coexist" in r)


def _why_unplaceable(setting: Setting, cluster: frozenset[str], service: str) -> str:
    head = f"{service} cannot be placed on any node"
    if not allowed_hardware(setting, [service]):
        wanted = " or ".join(_wanted(setting, service, "hardwaretypes"))
        return f"{head}: it needs hardware type {wanted}; {setting.hardware_scope}"
    if not allowed_images(setting, [service]):
        return f"{head}: it needs image type {' or '.join(_wanted(setting, service, 'imagetypes'))}; {setting.image_scope}"
    closure = must_closure(setting, cluster, service)
    partners = names(sorted(closure - {service}))
    for group in setting.template.constraints.layout.cantcoexist:
        if closure.issuperset(group):
            return f"{head}: it must coexist with {partners}, but {names(sorted(group))} can't coexist"
    for kind, word, allowed in (
        ("hardwaretypes", "hardware type", allowed_hardware),
        ("imagetypes", "image type", allowed_images),
    ):
        if not allowed(setting, closure):
            wants = "; ".join(
                f"{s} needs {' or '.join(_wanted(setting, s, kind))}" for s in sorted(closure) if _wanted(setting, s, kind)
            )
            return f"{head}: it must coexist with {partners}, and no {word} suits them all ({wants})"
    return f"{head}: no valid node layout holds it"


def why_not_added(setting: Setting, cluster: frozenset[str], service: str, groups: Sequence[tuple[NodeLayout, int]]) -> str:
    """Why no existing node can take `service` (add-services adds no nodes)."""
    blockers: list[str] = []
    hardware: list[str] = []
    images: list[str] = []
    others: list[str] = []
    for layout, _ in groups:
        present = set(layout.services)
        blocking = [g for g in setting.template.constraints.layout.cantcoexist if service in g and set(g) - {service} <= present]
        if blocking:
            for s in (s for g in blocking for s in sorted(set(g) - {service})):
                if s not in blockers:
                    blockers.append(s)
        elif not fits(setting, layout.hardware, layout.image, [service]):
            if not allowed_hardware(setting, [service], [layout.hardware]) and layout.hardware not in hardware:
                hardware.append(layout.hardware)
            elif not allowed_images(setting, [service], [layout.image]) and layout.image not in images:
                images.append(layout.image)
        else:
            others += [s for s in sorted(must_closure(setting, cluster, service) - present - {service}) if s not in others]
    parts = []
    if blockers:
        parts.append(f"it can't coexist with {names(blockers)}")
    if hardware:
        parts.append(f"it needs hardware type {' or '.join(_wanted(setting, service, 'hardwaretypes'))}, not {names(hardware)}")
    if images:
        parts.append(f"it needs image type {' or '.join(_wanted(setting, service, 'imagetypes'))}, not {names(images)}")
    if others:
        parts.append(f"it must coexist with {names(others)}, which cannot join it there")
    return f"{service} cannot be placed: {'; '.join(parts) or 'no existing node can take it'} and add-services adds no nodes"
