"""Whole-catalog validation: what `muster catalog apply` checks before anything reaches the log.

Pure (pydantic models from `contracts`, stdlib only). `validate_catalog` returns every problem
it finds, each naming the entity and the field; the caller adds the file. Errors block an apply,
warnings are shown.

What is checked:
- references resolve: a template's defaults, compatibility and constraints name existing
  providers, hardware types, image types and services; a service's `requires` are satisfied by
  a service's name or by what some service `provides`;
- templates resolve (`extends`/`includes` merge, no cycle, immutable partials respected), and the
  resolved template is consistent: its defaults are allowed by its compatibility lists, its default
  hardware and image exist for its default provider, its default services satisfy each other's
  `requires` and do not conflict, the service constraints fit the size constraint, and no
  must-coexist set contradicts a can't-coexist set or the quantities;
- services do not require themselves in a cycle;
- provider fields: a field the provider plugin declares `sensitive`, or an undeclared field whose
  name looks like a credential, is refused (it would be stored in the log in clear; it belongs in
  the provisioner's secrets file); declared fields must parse as the plugin's field type.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .catalog import Catalog, ClusterTemplate, Service
from .templates import TemplateError, resolve_template

Severity = Literal["error", "warning"]

KIND_LABEL = {
    "providers": "provider",
    "hardwaretypes": "hardware type",
    "imagetypes": "image type",
    "services": "service",
    "clustertemplates": "cluster template",
    "partialtemplates": "partial template",
}

SECRETS_HINT = "put it in the provisioner's secrets file under the provider's name (docs/secrets.md)"

# Field names that look like credentials. Used for provider fields no plugin descriptor
# declares (unknown provider types, or fields a plugin does not list).
SENSITIVE_NAME = re.compile(
    r"(pass(word|wd|phrase)?|secret|token|credential|private[_\-]?key|api[_\-]?key|access[_\-]?key|"
    r"secret[_\-]?key|client[_\-]?secret|auth[_\-]?key|session[_\-]?key|pwd)",
    re.IGNORECASE,
)
PRIVATE_KEY_TEXT = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")


def looks_sensitive(name: str) -> bool:
    return bool(SENSITIVE_NAME.search(name))


@dataclass(frozen=True)
class Problem:
    kind: str
    name: str
    field: str
    message: str
    severity: Severity = "error"
    source: str = ""

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def key(self) -> tuple[str, str, str, str]:
        """Identity of a problem regardless of where the entity was read from."""
        return (self.kind, self.name, self.field, self.message)

    def __str__(self) -> str:
        where = [x for x in (self.source, f"{KIND_LABEL.get(self.kind, self.kind)} {self.name!r}" if self.kind else "") if x]
        text = ": ".join(where)
        if self.field:
            text = f"{text}, field {self.field}" if text else f"field {self.field}"
        return f"{text}: {self.message}" if text else self.message


@dataclass(frozen=True)
class PluginField:
    sensitive: bool = False
    required: bool = False
    check: Callable[[Any], object] | None = None
    """Parses a value; raises ValueError with a message naming what is wrong."""


@dataclass(frozen=True)
class PluginSpec:
    """What validation needs of a plugin descriptor (built by the caller from `plugin.json`)."""

    name: str
    type: Literal["provider", "automator"]
    fields: Mapping[str, PluginField] = field(default_factory=dict)


def sensitive_provider_fields(catalog: Catalog, plugins: Sequence[PluginSpec] = ()) -> dict[str, list[str]]:
    """Provider name -> the fields of its `provisioner` map that must not be stored."""
    specs = {p.name: p for p in plugins if p.type == "provider"}
    out: dict[str, list[str]] = {}
    for name, provider in catalog.providers.items():
        plugin = specs.get(provider.providertype)
        found = [f for f, v in provider.provisioner.items() if _is_sensitive(plugin, f, v)]
        if found:
            out[name] = sorted(found)
    return out


def _is_sensitive(plugin: PluginSpec | None, name: str, value: Any) -> bool:
    declared = plugin.fields.get(name) if plugin else None
    if declared is not None:
        return declared.sensitive or _holds_private_key(value)
    return looks_sensitive(name) or _holds_private_key(value)


def _holds_private_key(value: Any) -> bool:
    if isinstance(value, str):
        return bool(PRIVATE_KEY_TEXT.search(value))
    if isinstance(value, Mapping):
        return any(_holds_private_key(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_private_key(v) for v in value)
    return False


def _names(items: Iterable[str]) -> str:
    return ", ".join(repr(i) for i in items)


class _Checker:
    def __init__(self, catalog: Catalog, plugins: Sequence[PluginSpec] | None) -> None:
        self.c = catalog
        self.plugins = plugins
        self.providers_by_type = {p.name: p for p in plugins or () if p.type == "provider"}
        self.automators = {p.name: p for p in plugins or () if p.type == "automator"}
        self.problems: list[Problem] = []
        self.provided: dict[str, set[str]] = {}
        for s in catalog.services.values():
            for name in s.dependencies.provides:
                self.provided.setdefault(name, set()).add(s.name)

    def add(self, kind: str, name: str, field: str, message: str, severity: Severity = "error") -> None:
        self.problems.append(Problem(kind, name, field, message, severity))

    # -- providers, hardware, images -------------------------------------------------------

    def providers(self) -> None:
        for name, p in sorted(self.c.providers.items()):
            plugin = self.providers_by_type.get(p.providertype)
            if self.plugins is not None and plugin is None:
                known = _names(sorted(self.providers_by_type)) or "none"
                self.add("providers", name, "providertype",
                         f"no provider plugin {p.providertype!r} is known here (known: {known}); "
                         "a provisioner must load one", "warning")
            for f, value in sorted(p.provisioner.items()):
                where = f"provisioner.{f}"
                declared = plugin.fields.get(f) if plugin else None
                if _is_sensitive(plugin, f, value):
                    why = (f"is declared sensitive by the {p.providertype!r} provider plugin" if declared is not None and declared.sensitive
                           else "holds a private key" if _holds_private_key(value) else "looks like a credential")
                    self.add("providers", name, where,
                             f"{why}; sensitive fields must not be in the catalog (the log keeps them in clear): {SECRETS_HINT}")
                elif declared is not None and declared.check is not None:
                    try:
                        declared.check(value)
                    except ValueError as err:
                        self.add("providers", name, where, str(err))
                elif plugin is not None and declared is None:
                    self.add("providers", name, where,
                             f"not a field of the {p.providertype!r} provider plugin (fields: {_names(sorted(plugin.fields))})", "warning")

    def provider_maps(self) -> None:
        for kind, key in (("hardwaretypes", "flavor"), ("imagetypes", "image")):
            for name, entity in sorted(self.c.entities(kind).items()):
                for provider, fields in sorted(entity.providermap.items()):
                    if provider not in self.c.providers:
                        self.add(kind, name, f"providermap.{provider}", f"names provider {provider!r}, which is not in the catalog", "warning")
                    elif key not in fields:
                        self.add(kind, name, f"providermap.{provider}", f"has no {key!r}, so provider {provider!r} cannot use it", "warning")

    # -- services ------------------------------------------------------------------------

    def satisfiable(self, requirement: str, among: Iterable[str] | None = None) -> bool:
        pool = set(self.c.services) if among is None else set(among)
        return requirement in pool or bool(self.provided.get(requirement, set()) & pool)

    def services(self) -> None:
        for name, s in sorted(self.c.services.items()):
            deps = s.dependencies
            for stage in ("install", "runtime"):
                st = getattr(deps, stage)
                for r in st.requires:
                    if r == name:
                        self.add("services", name, f"dependencies.{stage}.requires", "a service cannot require itself")
                    elif not self.satisfiable(r):
                        self.add("services", name, f"dependencies.{stage}.requires",
                                 f"requires {r!r}, which no service in the catalog is or provides")
                    elif r in deps.conflicts:
                        self.add("services", name, f"dependencies.{stage}.requires", f"requires {r!r} and also conflicts with it")
                for u in st.uses:
                    if not self.satisfiable(u):
                        self.add("services", name, f"dependencies.{stage}.uses",
                                 f"uses {u!r}, which no service in the catalog is or provides", "warning")
            for c in deps.conflicts:
                if c == name:
                    self.add("services", name, "dependencies.conflicts", "a service cannot conflict with itself")
                elif not self.satisfiable(c):
                    self.add("services", name, "dependencies.conflicts", f"conflicts with {c!r}, which is not in the catalog", "warning")
            self.service_actions(name, s)
        self.dependency_cycles()

    def service_actions(self, name: str, s: Service) -> None:
        if self.plugins is None:
            return
        for action, spec in sorted(s.provisioner.actions.items(), key=lambda kv: kv[0].value):
            where = f"provisioner.actions.{action.value}"
            plugin = self.automators.get(spec.type)
            if plugin is None:
                known = _names(sorted(self.automators)) or "none"
                self.add("services", name, f"{where}.type",
                         f"no automator plugin {spec.type!r} is known here (known: {known}); a provisioner must load one", "warning")
                continue
            for f, fs in sorted(plugin.fields.items()):
                if fs.required and not spec.fields.get(f):
                    self.add("services", name, f"{where}.fields.{f}", f"the {spec.type!r} automator requires this field")
            for f, value in sorted(spec.fields.items()):
                fs = plugin.fields.get(f)
                if fs is not None and fs.check is not None and value != "":
                    try:
                        fs.check(value)
                    except ValueError as err:
                        self.add("services", name, f"{where}.fields.{f}", str(err))

    def _edges(self, stage: str) -> dict[str, list[tuple[str, bool]]]:
        """service -> [(dependency, is_required)], with `provides` substituted."""
        graph: dict[str, list[tuple[str, bool]]] = {}
        for name, s in self.c.services.items():
            st = getattr(s.dependencies, stage)
            out: list[tuple[str, bool]] = []
            for dep, required in [(r, True) for r in st.requires] + [(u, False) for u in st.uses]:
                targets = ({dep} & set(self.c.services)) | self.provided.get(dep, set())
                out += [(t, required) for t in sorted(targets) if t != name]
            graph[name] = out
        return graph

    def dependency_cycles(self) -> None:
        seen: set[frozenset[str]] = set()
        for stage in ("install", "runtime"):
            graph = self._edges(stage)
            for cycle, all_required in _cycles(graph):
                members = frozenset(cycle)
                if members in seen:
                    continue
                seen.add(members)
                first = min(cycle)
                chain = " -> ".join([*cycle, cycle[0]])
                if all_required:
                    self.add("services", first, f"dependencies.{stage}",
                             f"{stage} dependency cycle {chain}: these services can never be installed and started together")
                else:
                    self.add("services", first, f"dependencies.{stage}",
                             f"{stage} dependency cycle {chain} (through 'uses'): a cluster with all of them cannot be planned", "warning")

    # -- templates ---------------------------------------------------------------------------

    def _exists(self, kind: str, what: str, names: Iterable[str], entity_kind: str, entity: str, where: str) -> None:
        pool = self.c.entities(kind)
        for n in names:
            if n not in pool:
                self.add(entity_kind, entity, where, f"names {what} {n!r}, which is not in the catalog")

    def template_references(self, kind: str, name: str, t: ClusterTemplate) -> None:
        """Every name the template's own body mentions exists."""
        d, comp, cons = t.defaults, t.compatibility, t.constraints
        if d.provider is not None:
            self._exists("providers", "provider", [d.provider], kind, name, "defaults.provider")
        if d.hardwaretype is not None:
            self._exists("hardwaretypes", "hardware type", [d.hardwaretype], kind, name, "defaults.hardwaretype")
        if d.imagetype is not None:
            self._exists("imagetypes", "image type", [d.imagetype], kind, name, "defaults.imagetype")
        self._exists("services", "service", d.services, kind, name, "defaults.services")
        self._exists("hardwaretypes", "hardware type", comp.hardwaretypes, kind, name, "compatibility.hardwaretypes")
        self._exists("imagetypes", "image type", comp.imagetypes, kind, name, "compatibility.imagetypes")
        self._exists("services", "service", comp.services, kind, name, "compatibility.services")
        for rule in ("mustcoexist", "cantcoexist"):
            for i, group in enumerate(getattr(cons.layout, rule)):
                self._exists("services", "service", group, kind, name, f"constraints.layout.{rule}[{i}]")
        for svc, sc in sorted(cons.services.items()):
            self._exists("services", "service", [svc], kind, name, f"constraints.services.{svc}")
            self._exists("hardwaretypes", "hardware type", sc.hardwaretypes, kind, name, f"constraints.services.{svc}.hardwaretypes")
            self._exists("imagetypes", "image type", sc.imagetypes, kind, name, f"constraints.services.{svc}.imagetypes")

    def templates(self) -> None:
        for kind in ("partialtemplates", "clustertemplates"):
            for name, t in sorted(self.c.entities(kind).items()):
                self.template_references(kind, name, t)
                if kind == "clustertemplates" and t.immutable:
                    self.add(kind, name, "immutable", "only partial templates can be immutable; it has no effect here", "warning")
        for name, t in sorted(self.c.clustertemplates.items()):
            try:
                resolved = resolve_template(self.c, name)
            except TemplateError as err:
                if "immutable" in str(err) or (t.extends is None and not t.includes):
                    where = "defaults.config"
                else:
                    where = "/".join(f for f, v in (("extends", t.extends), ("includes", t.includes)) if v)
                self.add("clustertemplates", name, where, str(err))
                continue
            self.resolved_template(name, resolved)

    def resolved_template(self, name: str, t: ClusterTemplate) -> None:
        k = "clustertemplates"
        d, comp, cons = t.defaults, t.compatibility, t.constraints
        services = self.c.services
        provider = d.provider if d.provider in self.c.providers else None
        if d.provider is None:
            self.add(k, name, "defaults.provider", "no default provider: every create request must name one", "warning")
        for attr, kind, key, allows in (("hardwaretype", "hardwaretypes", "flavor", comp.allows_hardware),
                                        ("imagetype", "imagetypes", "image", comp.allows_image)):
            value = getattr(d, attr)
            if value is None or value not in self.c.entities(kind):
                continue
            if not allows(value):
                self.add(k, name, f"defaults.{attr}", f"default {attr} {value!r} is not in compatibility.{kind}")
            if provider is not None and key not in self.c.entities(kind)[value].providermap.get(provider, {}):
                self.add(k, name, f"defaults.{attr}", f"{attr} {value!r} has no {key!r} for the default provider {provider!r}")
        defaults = [s for s in d.services if s in services]
        for s in defaults:
            if not comp.allows_service(s):
                self.add(k, name, "defaults.services", f"default service {s!r} is not in compatibility.services")
            for r in sorted(services[s].dependencies.requires):
                if self.satisfiable(r) and not self.satisfiable(r, defaults):
                    self.add(k, name, "defaults.services", f"default service {s!r} requires {r!r}, which no default service is or provides")
            for c in services[s].dependencies.conflicts:
                if c != s and self.satisfiable(c, defaults):
                    self.add(k, name, "defaults.services", f"default services {s!r} and {c!r} conflict")
            q = cons.services.get(s)
            if q is not None and q.quantities.max == 0:
                self.add(k, name, f"constraints.services.{s}.quantities.max", f"default service {s!r} may run on no node (max 0)")
        size = cons.size
        for s, sc in sorted(cons.services.items()):
            if s in services and not comp.allows_service(s):
                self.add(k, name, f"constraints.services.{s}", f"service {s!r} is constrained but not in compatibility.services", "warning")
            for attr, allows in (("hardwaretypes", comp.allows_hardware), ("imagetypes", comp.allows_image)):
                listed = [x for x in getattr(sc, attr) if x in self.c.entities(attr)]
                if listed and not any(allows(x) for x in listed):
                    self.add(k, name, f"constraints.services.{s}.{attr}",
                             f"none of {_names(listed)} is in compatibility.{attr}, so {s!r} can be placed nowhere")
            if size.max is not None and sc.quantities.min > size.max:
                self.add(k, name, f"constraints.services.{s}.quantities.min",
                         f"{s!r} needs at least {sc.quantities.min} nodes but the cluster size max is {size.max}")
        self.layout_contradictions(name, t)

    def layout_contradictions(self, name: str, t: ClusterTemplate) -> None:
        k = "clustertemplates"
        cons = t.constraints
        must = [set(g) for g in cons.layout.mustcoexist]
        for i, group in enumerate(cons.layout.cantcoexist):
            members = set(group)
            if len(members) == 1:
                (only,) = members
                self.add(k, name, f"constraints.layout.cantcoexist[{i}]",
                         f"a can't-coexist set of one service forbids {only!r} on every node")
                continue
            for j, m in enumerate(must):
                if members and members <= m:
                    self.add(k, name, f"constraints.layout.cantcoexist[{i}]",
                             f"services {_names(sorted(members))} must coexist (constraints.layout.mustcoexist[{j}]) "
                             "and can't coexist: no cluster can have all of them")
        for j, m in enumerate(must):
            # Must-coexist members present in a cluster run on exactly the same nodes.
            for a in sorted(m):
                for b in sorted(m):
                    qa, qb = cons.services.get(a), cons.services.get(b)
                    if qa and qb and qa.quantities.max is not None and qb.quantities.min > qa.quantities.max:
                        self.add(k, name, f"constraints.layout.mustcoexist[{j}]",
                                 f"{a!r} and {b!r} must run on the same nodes, but {b!r} needs at least "
                                 f"{qb.quantities.min} and {a!r} allows at most {qa.quantities.max}")


def _cycles(graph: Mapping[str, list[tuple[str, bool]]]) -> list[tuple[list[str], bool]]:
    """One cycle per strongly connected component (Tarjan, iterative), with whether every edge
    on the reported cycle is a `requires`."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            edges = graph.get(node, [])
            if i < len(edges):
                work.append((node, i + 1))
                nxt = edges[i][0]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    components.append(comp)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    out = []
    for comp in components:
        members = set(comp)
        # Prefer a cycle of `requires` edges only; else any cycle.
        for required_only in (True, False):
            cycle = _find_cycle(graph, members, required_only)
            if cycle:
                out.append((cycle, required_only))
                break
    return out


def _find_cycle(graph: Mapping[str, list[tuple[str, bool]]], members: set[str], required_only: bool) -> list[str] | None:
    for start in sorted(members):
        # Shortest path back to start, by breadth-first search inside the component.
        parents: dict[str, str] = {}
        frontier = [start]
        while frontier:
            nxt: list[str] = []
            for node in frontier:
                for dep, required in graph.get(node, []):
                    if dep not in members or (required_only and not required):
                        continue
                    if dep == start:
                        path = [node]
                        while path[-1] != start:
                            path.append(parents[path[-1]])
                        return list(reversed(path))
                    if dep not in parents:
                        parents[dep] = node
                        nxt.append(dep)
            frontier = nxt
    return None


def validate_catalog(catalog: Catalog, plugins: Sequence[PluginSpec] | None = None) -> list[Problem]:
    """Every problem of the catalog as a whole. Without `plugins`, plugin-specific checks are
    skipped (credential-looking provider fields are still refused)."""
    checker = _Checker(catalog, plugins)
    checker.providers()
    checker.provider_maps()
    checker.services()
    checker.templates()
    return checker.problems + config_warnings(catalog)


def config_warnings(catalog: Catalog) -> list[Problem]:
    """Template config keys that look like secrets: they are stored and shown in clear."""
    out = []
    for kind in ("clustertemplates", "partialtemplates"):
        for name, t in sorted(catalog.entities(kind).items()):
            for path in _secret_looking_keys(t.defaults.config, "defaults.config"):
                out.append(Problem(kind, name, path, "looks like a secret; template config is stored in the log and shown in clear", "warning"))
    return out


def _secret_looking_keys(value: Any, prefix: str) -> list[str]:
    found: list[str] = []
    if isinstance(value, Mapping):
        for k, v in value.items():
            path = f"{prefix}.{k}"
            if looks_sensitive(str(k)) and not isinstance(v, Mapping):
                found.append(path)
            found += _secret_looking_keys(v, path)
    return found
