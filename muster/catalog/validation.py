"""Whole-catalog validation: what `muster catalog apply` checks before anything reaches the log.

Pure (contract models, stdlib only). `validate_catalog` returns every problem it finds, each
naming the entity and the field; the caller adds the file. Errors block an apply, warnings are
shown.

What is checked:
- references resolve: a template's defaults, compatibility and constraints name existing
  providers, hardware types, image types and services; a service's `requires` are satisfied by
  a service's name or by what some service `provides`;
- templates resolve (`extends`/`includes` merge, no cycle, immutable partials respected), and the
  resolved template is consistent (`template_checks.py`);
- services do not require themselves in a cycle (`cycles.py`);
- secrets: a provider field the provider plugin declares `sensitive`, and anywhere in any entity
  a value under a secret's name or holding a private key (contracts.secrets, at any depth), is
  refused (it would be stored in the log in clear; it belongs in the provisioners' secrets file,
  referred to as `secret://<name>` where the catalog must name it); declared fields must parse
  as the plugin's field type.

Plugins are known only through the `PluginSpecs` registry the caller gives (None: plugin checks
are skipped).
"""

from __future__ import annotations

from collections.abc import Iterable

from contracts.catalog import Catalog, Service, price
from contracts.secrets import is_reference, private_keys
from muster.macros import problems as macro_problems

from . import template_checks
from .cycles import cycles
from .plugins import PluginSpecs
from .problems import Problem, Severity, quoted
from .sensitive import SECRETS_HINT, entity_secrets, sensitive_paths


class Checker:
    """Collects the problems of one catalog; the template checks are in template_checks.py."""

    def __init__(self, catalog: Catalog, plugins: PluginSpecs | None) -> None:
        self.c = catalog
        self.plugins = plugins
        self.providers_by_type = plugins.providers if plugins is not None else {}
        self.automators = plugins.automators if plugins is not None else {}
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
                known = quoted(sorted(self.providers_by_type)) or "none"
                self.add("providers", name, "providertype",
                         f"names provider plugin {p.providertype!r}, which no provisioner offers (known: {known}): "
                         "install a plugin of that name on the provisioners (--plugins-dir), or use one of those")
            for f, value in sorted(p.provisioner.items()):
                where = f"provisioner.{f}"
                declared = plugin.fields.get(f) if plugin else None
                in_clear = sensitive_paths(plugin, f, value)
                keys = private_keys(value, f)
                for path in in_clear:
                    why = (f"is declared sensitive by the {p.providertype!r} provider plugin" if declared is not None and declared.sensitive
                           else "holds a private key" if path in keys else "looks like a credential")
                    self.add("providers", name, f"provisioner.{path}",
                             f"{why}; sensitive fields must not be in the catalog (the log keeps them in clear): {SECRETS_HINT}")
                if in_clear:
                    continue
                if is_reference(value):
                    continue  # a named secret: resolved on the worker (its type checked there)
                if declared is not None and declared.check is not None:
                    try:
                        declared.check(value)
                    except ValueError as err:
                        self.add("providers", name, where, str(err))
                elif plugin is not None and declared is None:
                    self.add("providers", name, where,
                             f"not a field of the {p.providertype!r} provider plugin (fields: {quoted(sorted(plugin.fields))})", "warning")

    def provider_maps(self) -> None:
        for kind, key in (("hardwaretypes", "flavor"), ("imagetypes", "image")):
            for name, entity in sorted(self.c.entities(kind).items()):
                for provider, fields in sorted(entity.providermap.items()):
                    if provider not in self.c.providers:
                        self.add(kind, name, f"providermap.{provider}", f"names provider {provider!r}, which is not in the catalog", "warning")
                    elif key not in fields:
                        self.add(kind, name, f"providermap.{provider}", f"has no {key!r}, so provider {provider!r} cannot use it", "warning")
                    cost = fields.get("cost") if kind == "hardwaretypes" else None
                    if cost is not None and price(cost) is None:
                        self.add(kind, name, f"providermap.{provider}.cost",
                                 f"{cost!r} is not a price: give a number of at least 0, per node and hour (\"0.05\"); "
                                 "the solver prefers cheaper hardware by it and previews add it up")

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
        missing: dict[str, list[str]] = {}
        for action, spec in sorted(s.provisioner.actions.items(), key=lambda kv: kv[0].value):
            where = f"provisioner.actions.{action.value}"
            plugin = self.automators.get(spec.type)
            if plugin is None:
                missing.setdefault(spec.type, []).append(action.value)
                continue
            for f, fs in sorted(plugin.fields.items()):
                if fs.required and not spec.fields.get(f):
                    self.add("services", name, f"{where}.fields.{f}", f"the {spec.type!r} automator requires this field")
            for f, value in sorted(spec.fields.items()):
                field = plugin.fields.get(f)
                if field is not None and field.check is not None and value != "":
                    try:
                        field.check(value)
                    except ValueError as err:
                        self.add("services", name, f"{where}.fields.{f}", str(err))
        for automator, actions in sorted(missing.items()):  # one reason per service and missing plugin
            known = quoted(sorted(self.automators)) or "none"
            self.add("services", name, "provisioner.actions",
                     f"{'action' if len(actions) == 1 else 'actions'} {', '.join(actions)} {'names' if len(actions) == 1 else 'name'} automator plugin {automator!r}, "
                     f"which no provisioner offers (known: {known}): install a plugin of that name on the provisioners "
                     "(--plugins-dir), or move the actions to shell or ansible (docs/plugins.md)")

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
            for cycle, all_required in cycles(graph):
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

    def secrets(self) -> None:
        """Anything else that carries a secret in clear: template config, service action fields,
        provider maps, at any depth (providers are checked field by field above)."""
        for kind in ("hardwaretypes", "imagetypes", "services", "clustertemplates", "partialtemplates"):
            for name, entity in sorted(self.c.entities(kind).items()):
                for path in entity_secrets(entity):
                    self.add(kind, name, path, "looks like a secret; the catalog is stored in the log, which keeps it in "
                             f"clear forever: {SECRETS_HINT}")


def validate_catalog(catalog: Catalog, plugins: PluginSpecs | None = None) -> list[Problem]:
    """Every problem of the catalog as a whole. Without `plugins`, plugin-specific checks are
    skipped (credential-looking provider fields are still refused)."""
    checker = Checker(catalog, plugins)
    checker.providers()
    checker.provider_maps()
    checker.services()
    checker.secrets()
    template_checks.check(checker)
    return checker.problems + macro_warnings(catalog)


def macro_warnings(catalog: Catalog) -> list[Problem]:
    """Template config text between `%` signs that is not a macro Coopr knows: every task
    that gets the config would fail on it (muster/macros.py). A warning, not an
    error: a `%` may be meant literally (Coopr refused such templates)."""
    out = []
    for kind in ("clustertemplates", "partialtemplates"):
        for name, t in sorted(catalog.entities(kind).items()):
            for found in macro_problems(t.defaults.config):
                out.append(Problem(kind, name, "defaults.config", f"{found}: tasks would fail on it", "warning"))
    return out


