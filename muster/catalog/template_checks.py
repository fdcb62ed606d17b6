"""Template checks of catalog validation (pure): are the cluster templates consistent?

Every name a template mentions exists, and each cluster template, resolved with its parents and
partials, is consistent: its defaults are allowed by its compatibility lists, its default
hardware and image exist for its default provider, its default services meet each other's
`requires` and do not conflict, the service constraints fit the size constraint, and no
must-coexist set contradicts a can't-coexist set or the quantities."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from contracts.catalog import Catalog, ClusterTemplate

from .problems import Severity, quoted
from .templates import TemplateError, resolve_template


class Checker(Protocol):
    """What the checks need of the whole-catalog checker (`validation.Checker`)."""

    @property
    def c(self) -> Catalog: ...

    def add(self, kind: str, name: str, field: str, message: str, severity: Severity = "error") -> None: ...

    def satisfiable(self, requirement: str, among: Iterable[str] | None = None) -> bool: ...


def _exists(ch: Checker, kind: str, what: str, names: Iterable[str], entity_kind: str, entity: str, where: str) -> None:
    pool = ch.c.entities(kind)
    for n in names:
        if n not in pool:
            ch.add(entity_kind, entity, where, f"names {what} {n!r}, which is not in the catalog")


def template_references(ch: Checker, kind: str, name: str, t: ClusterTemplate) -> None:
    """Every name the template's own body mentions exists."""
    d, comp, cons = t.defaults, t.compatibility, t.constraints
    if d.provider is not None:
        _exists(ch, "providers", "provider", [d.provider], kind, name, "defaults.provider")
    if d.hardwaretype is not None:
        _exists(ch, "hardwaretypes", "hardware type", [d.hardwaretype], kind, name, "defaults.hardwaretype")
    if d.imagetype is not None:
        _exists(ch, "imagetypes", "image type", [d.imagetype], kind, name, "defaults.imagetype")
    _exists(ch, "services", "service", d.services, kind, name, "defaults.services")
    _exists(ch, "hardwaretypes", "hardware type", comp.hardwaretypes, kind, name, "compatibility.hardwaretypes")
    _exists(ch, "imagetypes", "image type", comp.imagetypes, kind, name, "compatibility.imagetypes")
    _exists(ch, "services", "service", comp.services, kind, name, "compatibility.services")
    for rule in ("mustcoexist", "cantcoexist"):
        for i, group in enumerate(getattr(cons.layout, rule)):
            _exists(ch, "services", "service", group, kind, name, f"constraints.layout.{rule}[{i}]")
    for svc, sc in sorted(cons.services.items()):
        _exists(ch, "services", "service", [svc], kind, name, f"constraints.services.{svc}")
        _exists(ch, "hardwaretypes", "hardware type", sc.hardwaretypes, kind, name, f"constraints.services.{svc}.hardwaretypes")
        _exists(ch, "imagetypes", "image type", sc.imagetypes, kind, name, f"constraints.services.{svc}.imagetypes")


def check(ch: Checker) -> None:
    """Every template's references, then each cluster template resolved and checked."""
    for kind in ("partialtemplates", "clustertemplates"):
        for name, t in sorted(ch.c.entities(kind).items()):
            template_references(ch, kind, name, t)
            if kind == "clustertemplates" and t.immutable:
                ch.add(kind, name, "immutable", "only partial templates can be immutable; it has no effect here", "warning")
    for name, t in sorted(ch.c.clustertemplates.items()):
        try:
            resolved = resolve_template(ch.c, name)
        except TemplateError as err:
            if "immutable" in str(err) or (t.extends is None and not t.includes):
                where = "defaults.config"
            else:
                where = "/".join(f for f, v in (("extends", t.extends), ("includes", t.includes)) if v)
            ch.add("clustertemplates", name, where, str(err))
            continue
        resolved_template(ch, name, resolved)


def resolved_template(ch: Checker, name: str, t: ClusterTemplate) -> None:
    k = "clustertemplates"
    d, comp, cons = t.defaults, t.compatibility, t.constraints
    services = ch.c.services
    provider = d.provider if d.provider in ch.c.providers else None
    if d.provider is None:
        ch.add(k, name, "defaults.provider", "no default provider: every create request must name one", "warning")
    for attr, kind, key, allows in (("hardwaretype", "hardwaretypes", "flavor", comp.allows_hardware),
                                    ("imagetype", "imagetypes", "image", comp.allows_image)):
        value = getattr(d, attr)
        if value is None or value not in ch.c.entities(kind):
            continue
        if not allows(value):
            ch.add(k, name, f"defaults.{attr}", f"default {attr} {value!r} is not in compatibility.{kind}")
        if provider is not None and key not in ch.c.entities(kind)[value].providermap.get(provider, {}):
            ch.add(k, name, f"defaults.{attr}", f"{attr} {value!r} has no {key!r} for the default provider {provider!r}")
    defaults = [s for s in d.services if s in services]
    for s in defaults:
        if not comp.allows_service(s):
            ch.add(k, name, "defaults.services", f"default service {s!r} is not in compatibility.services")
        for r in sorted(services[s].dependencies.requires):
            if ch.satisfiable(r) and not ch.satisfiable(r, defaults):
                ch.add(k, name, "defaults.services", f"default service {s!r} requires {r!r}, which no default service is or provides")
        for c in services[s].dependencies.conflicts:
            if c != s and ch.satisfiable(c, defaults):
                ch.add(k, name, "defaults.services", f"default services {s!r} and {c!r} conflict")
        q = cons.services.get(s)
        if q is not None and q.quantities.max == 0:
            ch.add(k, name, f"constraints.services.{s}.quantities.max", f"default service {s!r} may run on no node (max 0)")
    size = cons.size
    for s, sc in sorted(cons.services.items()):
        if s in services and not comp.allows_service(s):
            ch.add(k, name, f"constraints.services.{s}", f"service {s!r} is constrained but not in compatibility.services", "warning")
        for attr, allows in (("hardwaretypes", comp.allows_hardware), ("imagetypes", comp.allows_image)):
            listed = [x for x in getattr(sc, attr) if x in ch.c.entities(attr)]
            if listed and not any(allows(x) for x in listed):
                ch.add(k, name, f"constraints.services.{s}.{attr}",
                       f"none of {quoted(listed)} is in compatibility.{attr}, so {s!r} can be placed nowhere")
        if size.max is not None and sc.quantities.min > size.max:
            ch.add(k, name, f"constraints.services.{s}.quantities.min",
                   f"{s!r} needs at least {sc.quantities.min} nodes but the cluster size max is {size.max}")
    layout_contradictions(ch, name, t)


def layout_contradictions(ch: Checker, name: str, t: ClusterTemplate) -> None:
    k = "clustertemplates"
    cons = t.constraints
    must = [set(g) for g in cons.layout.mustcoexist]
    for i, group in enumerate(cons.layout.cantcoexist):
        members = set(group)
        if len(members) == 1:
            (only,) = members
            ch.add(k, name, f"constraints.layout.cantcoexist[{i}]",
                   f"a can't-coexist set of one service forbids {only!r} on every node")
            continue
        for j, m in enumerate(must):
            if members and members <= m:
                ch.add(k, name, f"constraints.layout.cantcoexist[{i}]",
                       f"services {quoted(sorted(members))} must coexist (constraints.layout.mustcoexist[{j}]) "
                       "and can't coexist: no cluster can have all of them")
    for j, m in enumerate(must):
        # Must-coexist members present in a cluster run on exactly the same nodes.
        for a in sorted(m):
            for b in sorted(m):
                qa, qb = cons.services.get(a), cons.services.get(b)
                if qa and qb and qa.quantities.max is not None and qb.quantities.min > qa.quantities.max:
                    ch.add(k, name, f"constraints.layout.mustcoexist[{j}]",
                           f"{a!r} and {b!r} must run on the same nodes, but {b!r} needs at least "
                           f"{qb.quantities.min} and {a!r} allows at most {qa.quantities.max}")
