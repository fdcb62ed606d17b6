"""Admission rules: may this request become a job? (pure)

Each rule looks at the facts the service loaded for one request and raises `Refused` with a
reason a person can act on; the operations table (`operations.py`) lists which rules each verb
runs, in order. Rules only read: the aggregates and catalog are never changed here.

A rule is where a new check goes (a permission, a quota, a lease): add a function with this
signature and name it in the table.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

from contracts.catalog import Catalog, ClusterTemplate
from contracts.commands import AddServices, CreateCluster, ExpandCluster, RemoveServices, ShrinkCluster, UpgradeService
from muster.catalog.templates import TemplateError, resolve_template
from muster.macros import instances_named, services_named

if TYPE_CHECKING:  # read only; no runtime import (the aggregates' modules import the table)
    from .cluster import Cluster
    from .job import Job


class Refused(Exception):
    """A request that cannot be accepted; the message is the reply's reason. `code` and `field`
    say what kind of refusal and which field of the request is at fault, when that is known
    (`contracts.commands.Rejected`); `job_id`: the job a reused request_id made first;
    `problems`: each problem of a request refused for several, as (field, reason)."""

    def __init__(self, reason: str, *, code: str | None = None, field: str | None = None, job_id: str | None = None,
                 problems: tuple[tuple[str | None, str], ...] = ()) -> None:
        super().__init__(reason)
        self.code, self.field, self.job_id, self.problems = code, field, job_id, problems


def every_refusal(rules: Iterable[Rule], f: Facts) -> list[Refused]:
    """What each rule refuses, once each: a create's rules look at separate fields, and a form
    with three mistakes was told of one per try. Rules that need the template repeat its
    refusal (deduplicated here) rather than guess at a template that is not there."""
    found: list[Refused] = []
    for rule in rules:
        try:
            rule(f)
        except Refused as err:
            for one in [Refused(r, code=err.code, field=field) for field, r in err.problems] or [err]:
                if not any(str(e) == str(one) and e.field == one.field for e in found):
                    found.append(one)
    return found


def together(found: list[Refused]) -> Refused:
    """One refusal of several problems: the reason says each (a client that reads only the
    reason, the CLI, shows them all), the first names the field and the kind of refusal."""
    if len(found) == 1:
        return found[0]
    first = found[0]
    return Refused("; ".join(str(e) for e in found), code=first.code, field=first.field,
                   problems=tuple((e.field, str(e)) for e in found))


class PoolAdmission(Protocol):
    def refusal(self, facts: Facts) -> str:
        """Why the pool would refuse this request now ('' if it would not)."""
        ...


@dataclass(frozen=True)
class Facts:
    """What admission knows about one request, loaded by the service before the rules run."""

    tenant: str
    operation: str
    command: Any
    catalog: Catalog
    job_id: str
    """The job the request maps to (derived from its idempotency key)."""
    cluster: Cluster | None = None
    current: Job | None = None
    """The cluster's job (the last one it ran, or the one running)."""
    source: Job | None = None
    """`rollback`: the job whose earlier state is the target."""
    since: tuple[Job, ...] = ()
    """`rollback`: the cluster's jobs from `source` on (it included), in order."""
    principal: str | None = None
    """Who asks (authenticated), when the transport knows; None before identities exist."""
    pools: PoolAdmission | None = None
    """Resource pools, when the planner has them."""
    catalog_seq: int | None = None
    """Where `catalog` is in the log (its last event): the job made of the request runs with it."""
    may_read: Callable[[str], bool] | None = None
    """Whether the requester may read a catalog entity (`<kind>/<name>`): a refusal's "did you
    mean" names only those (None: it names none)."""


Rule = Callable[[Facts], None]


def did_you_mean(f: Facts, name: str, kind: str, known: Iterable[str]) -> str:
    """` (did you mean 'x'?)` when one of the catalog's `kind` the requester may read is close."""
    readable = [k for k in known if f.may_read is not None and f.may_read(f"{kind}/{k}")]
    close = difflib.get_close_matches(name, readable, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _cluster(f: Facts) -> Cluster:
    assert f.cluster is not None, "a cluster rule without a cluster"
    return f.cluster


# -- every operation on an existing cluster ----------------------------------------------


def at_version(f: Facts) -> None:
    """`if_version`: a script's optimistic check that the cluster is as it last saw it."""
    want = getattr(f.command, "if_version", None)
    version = _cluster(f).version
    if want is not None and version != want:
        raise Refused(f"cluster {f.command.cluster_id!r} is at version {version}, not {want} (if_version): "
                      "it changed since you looked", code="precondition", field="if_version")


def not_busy(f: Facts) -> None:
    current = f.current
    if current is not None and not current.is_final and current.id != UUID(f.job_id):
        raise Refused(f"cluster {_named(f)} is busy with job {_cluster(f).job_id} ({current.operation}, {current.shown})",
                      code="conflict")


def _named(f: Facts) -> str:
    """The cluster as people named it, its id beside: a scheduled tick's refusal (`muster
    schedule list`) said only the id."""
    name = _cluster(f).name
    return f"{name} ({f.command.cluster_id})" if name else repr(f.command.cluster_id)


def not_deleted(f: Facts) -> None:
    if _cluster(f).status == "deleted":
        raise Refused(f"cluster {f.command.cluster_id!r} is deleted", code="conflict")


def active(f: Facts) -> None:
    cluster = _cluster(f)
    status = cluster.status
    if status not in ("active", "incomplete"):
        raise Refused(f"cluster {f.command.cluster_id!r} is {status}; {f.operation} needs an active cluster{_way_out(cluster)}",
                      code="conflict")


def _way_out(cluster: Cluster) -> str:
    """What to do with a cluster no operation but a delete takes: it said only its status."""
    why = f" ({cluster.status_reason})" if cluster.status_reason else ""
    if cluster.status == "needs_attention" and cluster.job_id:
        return (f": job {cluster.job_id} left it so{why}; `muster job retry {cluster.job_id}` runs the rest of its "
                "rollback, `muster cluster delete` removes the cluster")
    if cluster.status == "failed":
        return f": its create did not finish{why}; `muster cluster delete` removes it"
    return ""


# -- create --------------------------------------------------------------------------------


def template_of(f: Facts) -> ClusterTemplate:
    if not f.catalog.clustertemplates:  # most often a tenant's name mistyped (`--tenant acmee`)
        raise Refused(f"tenant {f.tenant!r} has no cluster templates: is it the tenant you meant (`muster tenant list`)? "
                      "A tenant's catalog comes from `muster catalog apply`", code="invalid", field="template")
    name = f.command.template
    if f.may_read is not None and not f.may_read(f"clustertemplates/{name}"):
        # A template is used by those who may read it: what the console's create form and
        # `muster catalog get` list is what a create may name. The same words whether it exists
        # or not, so a name is not probed by creating.
        who = f.principal or "the requester"
        raise Refused(f"{who} may not create a cluster from template {name!r}: that needs read on "
                      f"catalog:clustertemplates/{name} or catalog:* (a tenant admin can give it: "
                      f"muster grant {who} read --scope catalog:clustertemplates/{name})"
                      f"{did_you_mean(f, name, 'clustertemplates', f.catalog.clustertemplates)}",
                      code="forbidden", field="template")
    if name not in f.catalog.clustertemplates:
        raise Refused(f"unknown cluster template {name!r}{did_you_mean(f, name, 'clustertemplates', f.catalog.clustertemplates)}",
                      code="invalid", field="template")
    try:
        return resolve_template(f.catalog, name)
    except TemplateError as err:
        raise Refused(str(err), code="invalid", field="template") from None


def template_allows_size(f: Facts) -> None:
    cmd: CreateCluster = f.command
    size = template_of(f).constraints.size
    if not size.allows(cmd.nodes):
        raise Refused(size.refusal(cmd.template, cmd.nodes), code="invalid", field="nodes")


def provider_of(f: Facts) -> str:
    return str(f.command.provider or template_of(f).defaults.provider or "")


def pool_admits(f: Facts) -> None:
    """A cluster on a pool: the pool exists, and its quotas and per-job limit allow the nodes
    (docs/pools.md). The pool checks again when it takes the request: it decides."""
    reason = f.pools.refusal(f) if f.pools is not None else ""
    if reason:
        raise Refused(reason, code="conflict")


def callback_needs_pool(f: Facts) -> None:
    """A callback is told of a wait for a pool's hosts (and of that job's end): on a provider
    that takes no hosts from a pool it would never be called, so it is refused, not ignored.
    (Where its URL may go is the pool service's rule: asked before the rules, `Requests.handle`.)"""
    cmd = f.command
    if not isinstance(cmd, CreateCluster | ExpandCluster) or cmd.pool.callback is None:
        return
    # A bus callback is published on a subject of the requester's tenant only (the pool request
    # the planner builds refuses another's, and a handler that fails on every redelivery held
    # the job without a word): refused here, nothing written, as a subscription's subject is.
    subject, own = cmd.pool.callback.subject, f"muster.cb.{f.tenant}."
    if subject is not None and not subject.startswith(own):
        raise Refused(f"--callback: its subject must be one of the tenant's, {own}…", code="invalid", field="pool.callback")
    provider = provider_of(f) if isinstance(cmd, CreateCluster) else _cluster(f).provider
    found = f.catalog.providers.get(provider)
    if found is None or not found.provisioner.get("pool"):
        raise Refused(f"--callback: provider {provider!r} takes no hosts from a pool, so nothing would call it back; "
                      "to hear of a job's end, subscribe to it (`muster notify add`, docs/governance.md)",
                      code="invalid", field="pool.callback")


def provider_known(f: Facts) -> None:
    provider = provider_of(f)
    if not provider or provider not in f.catalog.providers:
        raise Refused(f"unknown provider {provider!r}" if provider else f"template {f.command.template!r} names no default provider and the request none",
                      code="invalid", field="provider")


def services_of(f: Facts) -> list[str]:
    """The services a create puts on the cluster, or an add-services adds."""
    cmd = f.command
    if isinstance(cmd, CreateCluster):
        return list(cmd.services if cmd.services is not None else template_of(f).defaults.services)
    return list(cmd.services) if isinstance(cmd, AddServices) else []


def services_known(f: Facts) -> None:
    if isinstance(f.command, CreateCluster) and f.command.services == []:
        # (the solver answered "template 'hadoop-small' has no default services and none were requested")
        try:
            defaults = ", ".join(template_of(f).defaults.services)
        except Refused:  # (the template's own refusal is said at its field)
            defaults = ""
        raise Refused("no services named: name at least one, or leave services out for the template's defaults"
                      + (f" ({defaults})" if defaults else ""), code="invalid", field="services")
    if unknown := sorted(set(services_of(f)) - set(f.catalog.services)):
        said = ", ".join(s if s and s.strip() == s else repr(s) for s in unknown)  # (`[""]` said "unknown services: ")
        raise Refused(f"unknown services: {said}{_services_hint(f, unknown)}", code="invalid", field="services")


SERVICES_LISTED = 30
"""A cluster's services a refusal lists at most (a catalog may have dozens)."""


def named_services_known(f: Facts) -> None:
    """A start, stop, restart, upgrade or check names services of the cluster: refused at the field,
    before a plan is tried, naming each bad one (not in the catalog, or not on this cluster) and
    the services the cluster has. It said `unknown service 'nosuch': not in the catalog`, and
    left the person to find the cluster's services with another command."""
    cmd = f.command
    field, names = ("service", [cmd.service]) if isinstance(cmd, UpgradeService) else ("services", list(cmd.services or ()))
    on = _on_cluster(f)
    if not (unknown := sorted(set(names) - on)):
        return
    said = ", ".join(f"{s!r} ({'not on this cluster' if s in f.catalog.services else 'not in the catalog'})" for s in unknown)
    has = sorted(on)
    listed = ", ".join(has[:SERVICES_LISTED]) + (f", ... ({len(has)} in all)" if len(has) > SERVICES_LISTED else "")
    close = difflib.get_close_matches(unknown[0], has, n=1, cutoff=0.6) if len(unknown) == 1 else []
    raise Refused(f"cluster {_cluster(f).name!r} has no {'service' if len(unknown) == 1 else 'services'} {said}; "
                  f"its services: {listed or 'none'}" + (f" (did you mean {close[0]!r}?)" if close else ""),
                  code="invalid", field=field)


def _services_hint(f: Facts, unknown: list[str]) -> str:
    return did_you_mean(f, unknown[0], "services", f.catalog.services) if len(unknown) == 1 else ""


def _template_of_request(f: Facts) -> ClusterTemplate | None:
    """The template a create names, or an existing cluster's (None: it is gone from the catalog;
    the solver says so)."""
    name = f.command.template if isinstance(f.command, CreateCluster) else _cluster(f).template
    try:
        return resolve_template(f.catalog, name)
    except TemplateError:
        return None


def services_allowed(f: Facts) -> None:
    """The template's compatibility allows every service asked for (an empty list allows all)."""
    if isinstance(f.command, CreateCluster):
        try:  # a template the requester may not read is not described (its own rule refuses it)
            template: ClusterTemplate | None = template_of(f)
        except Refused:
            return
    else:
        template = _template_of_request(f)
    if template is None:
        return
    # (an unknown service is refused as that, by its own rule)
    if forbidden := sorted(s for s in set(services_of(f)) if s in f.catalog.services and not template.compatibility.allows_service(s)):
        raise Refused(f"template {template.name!r} does not allow {', '.join(forbidden)} "
                      f"(allowed: {', '.join(template.compatibility.services)})", code="invalid", field="services")


def setting_allowed(f: Facts) -> None:
    """A create's hardware and image types exist and the template allows them: each refused
    at its field (both, when both are wrong), whether the template is there or not."""
    cmd: CreateCluster = f.command
    found: list[Refused] = []
    for field, kind, name, known in (("hardwaretype", "hardware type", cmd.hardwaretype, f.catalog.hardwaretypes),
                                     ("imagetype", "image type", cmd.imagetype, f.catalog.imagetypes)):
        if name is None:
            continue
        if name not in known:
            found.append(Refused(f"unknown {kind} {name!r}", code="invalid", field=field))
            continue
        try:
            template = template_of(f)
        except Refused:
            continue  # (refused at the template's field by its own rule)
        allowed = getattr(template.compatibility, field + "s")
        if allowed and name not in allowed:
            found.append(Refused(f"template {template.name!r} does not allow {kind} {name!r} (allowed: {', '.join(allowed)})",
                                 code="invalid", field=field))
    if found:
        raise together(found)


def provider_mapped(f: Facts) -> None:
    """Some hardware type and some image type the create may use maps its provider (a `flavor`,
    an `image` in its providermap): the solver picks only among those. A create on a provider
    none maps was accepted and failed at layout time, after the job was recorded. Refused at the
    provider's field (at the type's own when the request names one), naming the providers that
    would do; an unknown provider, template or type is refused by its own rule."""
    cmd: CreateCluster = f.command
    try:
        template = template_of(f)
    except Refused:
        return
    provider = cmd.provider or template.defaults.provider
    if not provider or provider not in f.catalog.providers:
        return
    found: list[Refused] = []
    for field, kind, key, asked, known in (
            ("hardwaretype", "hardware type", "flavor", cmd.hardwaretype, f.catalog.hardwaretypes),
            ("imagetype", "image type", "image", cmd.imagetype, f.catalog.imagetypes)):
        allowed: list[str] = getattr(template.compatibility, field + "s")
        if asked is not None and (asked not in known or (allowed and asked not in allowed)):
            continue  # (refused at its field by setting_allowed)
        candidates = [asked] if asked is not None else sorted(n for n in known if not allowed or n in allowed)
        if any(key in known[n].providermap.get(provider, {}) for n in candidates):
            continue
        mapped = sorted({p for n in candidates for p, m in known[n].providermap.items() if key in m and p in f.catalog.providers})
        listed = ", ".join(candidates[:SERVICES_LISTED]) + (f", ... ({len(candidates)} in all)" if len(candidates) > SERVICES_LISTED else "")
        which = (f"{kind} {asked!r} does not map provider {provider!r} (no {key!r} for it in its providermap)" if asked is not None else
                 f"no {kind} that template {template.name!r} allows ({listed or 'none'}) maps provider {provider!r} "
                 f"(no {key!r} for it in their providermaps)")
        found.append(Refused(
            f"{which}: no layout can be made; "
            + (f"{'it maps' if asked is not None else 'they map'} {', '.join(mapped)}" if mapped else
               f"add {{{provider!r}: {{{key!r}: ...}}}} to a {kind}'s providermap (muster catalog apply)"),
            code="invalid", field=field if asked is not None else "provider"))
    if found:
        raise together(found)


# -- layout changes --------------------------------------------------------------------------


def _other_way(f: Facts, verb: str, nodes: int) -> str:
    """The command that goes to `nodes` when an expand or shrink was asked the wrong way (walk
    of session 27: an expand to fewer nodes said only that it needs more); none when the
    template's size range would refuse that one too."""
    found = _size_change(f)
    if found is not None and not found[0].constraints.size.allows_change(found[1], nodes):
        return ""
    return f": to make it {'smaller' if verb == 'shrink' else 'larger'}, `muster cluster {verb} {_cluster(f).name} --nodes {nodes}`"


def grows(f: Facts) -> None:
    cmd: ExpandCluster = f.command
    total = len(_cluster(f).nodes)
    if cmd.nodes <= total:
        other = _other_way(f, "shrink", cmd.nodes) if cmd.nodes < total else ""
        raise Refused(f"expand needs more than the cluster's {total} nodes; {cmd.nodes} requested{other}", code="invalid",
                      field="nodes")


def shrinks(f: Facts) -> None:
    cmd: ShrinkCluster = f.command
    total = len(_cluster(f).nodes)
    if cmd.nodes >= total:
        other = _other_way(f, "expand", cmd.nodes) if cmd.nodes > total else ""
        raise Refused(f"shrink needs fewer than the cluster's {total} nodes; {cmd.nodes} requested{other}", code="invalid",
                      field="nodes")


def _size_change(f: Facts) -> tuple[ClusterTemplate, int, int] | None:
    """The cluster's template, its node count and the count the request asks for (None: the
    template is gone from the catalog; the solver says so)."""
    template = _template_of_request(f)
    if template is None:
        return None
    current = len(_cluster(f).nodes)
    return template, current, getattr(f.command, "nodes", None) or current


def _outside(template: ClusterTemplate, current: int) -> str:
    size = template.constraints.size
    way = "shrink" if size.max is not None and current > size.max else "grow"
    return (f"outside the size range of template {template.name!r} ({size.range_text} nodes), which changed after the "
            f"cluster was made: it may only {way} toward it")


def size_allowed(f: Facts) -> None:
    """An expand or shrink stays within the template's size range; a cluster outside it (the
    template changed since) may move toward it (`SizeConstraint.allows_change`): refused at
    once, not by a job the solver fails."""
    found = _size_change(f)
    if found is None:
        return
    template, current, nodes = found
    size = template.constraints.size
    if size.allows_change(current, nodes):
        return
    said = size.refusal(template.name, nodes)
    if not size.allows(current):
        said += f"; cluster {_cluster(f).name!r} has {current}, {_outside(template, current)}"
    raise Refused(said, code="invalid", field="nodes")


def size_notes(f: Facts) -> list[str]:
    """What an accepted change says of a cluster left outside its template's size range (the
    template changed after it was made): the answer's warnings, the dry run's too."""
    found = _size_change(f) if f.cluster is not None else None
    if found is None or f.operation not in OPERATIONS_WITH_LAYOUT:
        return []
    template, current, nodes = found
    if template.constraints.size.allows(nodes):
        return []
    after = f"will have {nodes}, still" if nodes != current else "stays"
    return [f"cluster {_cluster(f).name!r} has {current} nodes and {after} {_outside(template, current)}"]


def config_notes(f: Facts) -> list[str]:
    """What an accepted create or configure says of a config whose macros name a service the
    cluster has not (`%ip.service.redis-primary%` on the Ansible flavour's `redis-primary-ansible`):
    such a macro stays as written (Coopr's rule, muster/macros.py), and the service then failed
    far from the cause (a replica waited three times 60 s for a primary called
    `%ip.service.redis-primary%`, with `no message`)."""
    config = getattr(f.command, "config", None)
    if not config:
        return []
    try:
        has = set(services_of(f)) if isinstance(f.command, CreateCluster) else _on_cluster(f)
    except Refused:
        return []
    notes = []
    for service in sorted(services_named(config) - has):
        close = difflib.get_close_matches(service, sorted(has), n=1, cutoff=0.6)
        notes.append(f"config: a macro names service {service!r}, which the cluster does not have (its services: "
                     f"{', '.join(sorted(has)) or 'none'}): it stays as written, %...% and all"
                     + (f" (did you mean {close[0]!r}?)" if close else ""))
    if f.cluster is not None and not isinstance(f.command, CreateCluster):  # a create's counts wait for its layout
        counts = Counter(s for n in _cluster(f).nodes.values() for s in n.services)
        for service, index in sorted(instances_named(config).items()):
            if service in has and index >= counts[service]:
                notes.append(f"config: a macro names node [{index}] of service {service!r}, which runs on "
                             f"{counts[service]} node(s) (counted from 0): the tasks that expand it fail, not retried")
    return notes


OPERATIONS_WITH_LAYOUT = frozenset({"expand", "shrink", "add-services", "remove-services"})
"""The operations whose layout the solver checks against the template's size range."""


def _on_cluster(f: Facts) -> set[str]:
    return {s for n in _cluster(f).nodes.values() for s in n.services}


def services_absent(f: Facts) -> None:
    if present := sorted(set(services_of(f)) & _on_cluster(f)):
        raise Refused(f"already on the cluster: {', '.join(present)}", code="invalid", field="services")


def services_present(f: Facts) -> None:
    cmd: RemoveServices = f.command
    on = _on_cluster(f)
    if absent := sorted(set(cmd.services) - on):
        raise Refused(f"not on the cluster: {', '.join(absent)}", code="invalid", field="services")
    if on and not on - set(cmd.services):
        # The solver refuses it too, but only after the job was accepted: the request said
        # "accepted" and the job failed a moment later (`no layout: removing every service ...`).
        name = _cluster(f).name
        raise Refused(f"removing every service ({', '.join(sorted(on))}) leaves nothing on the cluster: "
                      f"to remove the nodes too, `muster cluster delete {name}`", code="invalid", field="services")
    if needed := _still_required(f.catalog, on - set(cmd.services), set(cmd.services)):
        # As the solver words it, before the job is accepted (it was, and then failed `no layout: ...`;
        # a dry run said this at once).
        raise Refused("; ".join(f"cannot remove {r}: {', '.join(by)} {'requires' if len(by) == 1 else 'require'} it"
                                for r, by in needed.items()), code="invalid", field="services")


def services_required(f: Facts) -> None:
    """Each service a create or add-services names has what it requires (at install or at run
    time) and nothing it conflicts with on the cluster it makes: refused at once from the catalog
    alone, in the solver's words. It was accepted, a cluster made, and its job failed a moment
    later (`no layout: yarn-nodemanager requires yarn-resourcemanager, ...`); a dry run said so
    at once. Unknown services are refused by their own rule; a service already on the cluster
    whose needs the catalog changed since is the solver's to say (the request did not choose it)."""
    cmd = f.command
    if isinstance(cmd, CreateCluster):
        try:
            chosen = set(services_of(f))
        except Refused:
            return  # (the template's own refusal is said at its field)
        on: set[str] = set()
    else:
        chosen, on = set(services_of(f)), _on_cluster(f)
    chosen &= set(f.catalog.services)
    cluster = chosen | on
    provided = _provided(f.catalog, cluster)
    problems: list[str] = []
    for service in sorted(cluster):
        if (entity := f.catalog.services.get(service)) is None:
            continue  # (gone from the catalog since: the solver says so)
        deps = entity.dependencies
        missing = sorted(r for r in deps.requires if r not in provided) if service in chosen else []
        if missing:
            problems.append(f"{service} requires {', '.join(missing)}, which no service on the cluster is or provides")
        # (a conflict is one service's word of another: the one on the cluster may be the one that says it)
        if clashing := sorted(c for c in deps.conflicts if c in cluster and c != service and (service in chosen or c in chosen)):
            problems.append(f"{service} conflicts with {', '.join(clashing)}")
    if problems:
        field = "template" if isinstance(cmd, CreateCluster) and cmd.services is None else "services"
        raise Refused("; ".join(problems), code="invalid", field=field)


def _provided(catalog: Catalog, services: set[str]) -> set[str]:
    """The services and what they provide: what a `requires` may be met by."""
    return services | {p for s in services if s in catalog.services for p in catalog.services[s].dependencies.provides}


def _still_required(catalog: Catalog, kept: set[str], removed: set[str]) -> dict[str, list[str]]:
    """Each removed service a kept one requires (at install or at run time), unless a kept one
    is it or provides it: the removed one -> who requires it."""
    provided = _provided(catalog, kept)
    needed: dict[str, list[str]] = {}
    for service in sorted(kept):
        entity = catalog.services.get(service)
        for r in sorted(entity.dependencies.requires if entity else ()):
            if r in removed and r not in provided:
                needed.setdefault(r, []).append(service)
    return needed


def nodes_known(f: Facts) -> None:
    """`nodes` (start, stop, restart, configure on chosen nodes): each a node of the cluster that
    has one of the named services (any service, when none are named), and each named service on
    one of them; the refusal names the node or service at fault."""
    picked = getattr(f.command, "nodes", None)
    if picked is None:
        return
    cluster = _cluster(f)
    if unknown := sorted(set(picked) - set(cluster.nodes)):
        some = ", ".join(sorted(cluster.nodes)[:5]) + (", ..." if len(cluster.nodes) > 5 else "")
        raise Refused(f"cluster {cluster.name!r} has no node {', '.join(unknown)} (its nodes: {some or 'none'})",
                      code="invalid", field="nodes")
    named = set(getattr(f.command, "services", None) or ())
    verb = f.operation.split("-")[0]
    for node in sorted(set(picked)):
        has = set(cluster.nodes[node].services)
        if not has or (named and not named & has):
            what = f"none of {', '.join(sorted(named))}" if named else "no service"
            raise Refused(f"node {node} of cluster {cluster.name!r} has {what} (it has: {', '.join(sorted(has)) or 'nothing'}): "
                          f"nothing to {verb} there", code="invalid", field="nodes")
    if absent := sorted(s for s in named if not any(s in cluster.nodes[n].services for n in picked)):
        raise Refused(f"{', '.join(absent)} is on none of the nodes {', '.join(sorted(set(picked)))} of cluster {cluster.name!r}",
                      code="invalid", field="services")


# -- repair -------------------------------------------------------------------------------------


def drifted(f: Facts) -> None:
    if _cluster(f).drift():  # every drift has a repair (an unknown state's: reconnect the node)
        return
    raise Refused(f"cluster {f.command.cluster_id!r} has no drift to repair (as last observed: `muster cluster check` "
                  "looks again)", code="conflict")


# -- rollback to an earlier state --------------------------------------------------------------


def restorable(f: Facts) -> None:
    source, to_job = f.source, f.command.to_job
    if source is None or source.cluster_id != f.command.cluster_id:
        raise Refused(f"unknown job {to_job!r} for cluster {f.command.cluster_id!r}", code="invalid", field="to_job")
    if not source.planned or source.operation == "create":
        raise Refused(f"job {to_job} left no earlier state to return to ({source.operation}, {source.state})", code="invalid",
                      field="to_job")
    if source.previous_stopped is None:
        raise Refused(f"job {to_job} did not record which services were stopped before it (planned by an older muster): "
                      "their running and stopped states cannot be restored; roll back to a later job", code="invalid", field="to_job")
    upgrades = [(str(j.id), sorted(upgraded(j))) for j in f.since if j.operation == "upgrade" and upgraded(j)]
    if upgrades:
        named = "; ".join(f"job {j} upgraded {', '.join(s)}" for j, s in upgrades)
        raise Refused(f"cannot restore the cluster as it was before job {to_job}: {named} since, and muster cannot put "
                      "back an older version of a service (installs use the catalog's current definition); roll back to a "
                      "job after the upgrade, or upgrade again from the catalog", code="conflict", field="to_job")


def upgraded(job: Job) -> set[str]:
    """The services an upgrade job installed again on some node (an install that succeeded)."""
    return {t.service for i, t in job.tasks.items()
            if t.service and t.action.value == "install" and job.task_state.get(i) == "succeeded"}
