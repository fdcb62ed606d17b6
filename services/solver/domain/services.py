"""Which services the cluster gets, and whether they may go together (coopr-facts §3.1):
every service exists and is allowed by the template; every `requires` is met by a service on
the cluster or by something one of them `provides`; no `conflicts` partner is present."""

from __future__ import annotations

from collections.abc import Iterable

from .errors import invalid
from .setting import Setting, names


def check_known(setting: Setting, services: Iterable[str], what: str = "service", field: str = "services") -> None:
    catalog, template = setting.catalog, setting.template
    for service in services:
        if service not in catalog.services:
            raise invalid(f"unknown {what} {service!r}", field)
        if not template.compatibility.allows_service(service):
            raise invalid(
                f"{what} {service!r} is not allowed by template {template.name!r} "
                f"(allowed: {names(template.compatibility.services)})", field
            )


def check_dependencies(setting: Setting, cluster: frozenset[str], removed: frozenset[str] = frozenset(),
                       field: str | None = "services") -> None:
    """`field`: the request's field that chose the services a missing `requires` or a conflict
    is about (None: nothing the request chose, the cluster's own services); a removal refused
    for what needs it is about `remove_services`."""
    catalog = setting.catalog
    provided = set(cluster)
    for service in cluster:
        provided.update(catalog.services[service].dependencies.provides)
    problems: list[str] = []
    fields: list[str] = []
    for service in sorted(cluster):
        deps = catalog.services[service].dependencies
        missing = sorted(r for r in deps.requires if r not in provided)
        if set(missing) & removed:
            problems.append(f"cannot remove {names(sorted(set(missing) & removed))}: {service} requires it")
            fields.append("remove_services")
            missing = [m for m in missing if m not in removed]
        if missing:
            problems.append(
                f"{service} requires {names(missing)}, which no service on the cluster is or provides"
            )
            fields += [field] if field else []
        clashing = sorted(c for c in deps.conflicts if c in cluster and c != service)
        if clashing:
            problems.append(f"{service} conflicts with {names(clashing)}")
            fields += [field] if field else []
    if problems:
        raise invalid("; ".join(problems), *dict.fromkeys(fields))


def requested_services(setting: Setting, services: tuple[str, ...] | None) -> frozenset[str]:
    chosen = list(services) if services is not None else list(setting.template.defaults.services)
    if not chosen:
        raise invalid("no services: none were requested" if services is not None else
                      f"no services: template {setting.template.name!r} has no default services and none were requested",
                      "services")
    check_known(setting, chosen)
    cluster = frozenset(chosen)
    check_dependencies(setting, cluster)
    return cluster
