"""From an accepted request to a recorded plan (pure): the new aggregates, the layout request
for the solver, and the plan of an operation once its layout is known.

The admission rules have run before any of this (`admission.py`); what can still go wrong
here is planning itself (`PlanError`), which the caller turns into a refusal or a failed job.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import NAMESPACE_URL, UUID, uuid5

from contracts.catalog import Catalog, Service
from contracts.commands import (
    COMMAND_ADAPTER,
    MAX_RELAYOUTS,
    AddServices,
    CheckCluster,
    CreateCluster,
    ExpandCluster,
    RemoveServices,
    RepairCluster,
    RestartServices,
    ShrinkCluster,
    StartServices,
    StopServices,
    UpgradeService,
)
from contracts.events import ClusterRequested, JobPlanned, JobRequested, LayoutRequested, PlannedTaskRecord
from contracts.layout import Layout, NodeSpec
from muster.catalog.templates import TemplateError, resolve_template
from muster.readmodel.desired import Pair

from . import leases, observed, resize, rolling
from .admission import Facts, Refused, provider_of, template_of
from .cluster import Cluster
from .errors import PlanError
from .job import Job, job_uuid
from .plan import Plan, build_plan
from .restore import chain_phases, exact


def cluster_uuid(job_id: str) -> UUID:
    """Derived from the job id, so a retried create maps to the same cluster."""
    return uuid5(NAMESPACE_URL, f"muster:cluster:{job_id}")


def created_ids(tenant: str, request_id: str | None) -> tuple[str, str]:
    """The ids of the job and the cluster a create with this idempotency key makes (random
    without one)."""
    job_id = str(job_uuid(tenant, request_id))
    return job_id, str(cluster_uuid(job_id))


def new_job(f: Facts, cluster_id: str, by: str, planner: str, max_attempts: int, plan_id: str | None = None,
            trace: tuple[str | None, str | None] = (None, None)) -> Job:
    """`trace`: the job's span and its parent, as traceparents (`muster.tracing.new_job`)."""
    return Job(JobRequested(tenant=f.tenant, job_id=f.job_id, cluster_id=cluster_id, operation=f.operation,
                            # The log keeps who sent it (the transport's principal), not the client's
                            # claim (the CLI's default is the OS user name: `root` read as the super admin).
                            request={**f.command.model_dump(mode="json"), "requested_by": by}, requested_by=by,
                            planner=planner, max_attempts=max_attempts, plan_id=plan_id, relayout=relayouts(f),
                            trace=trace[0], trace_parent=trace[1], catalog_seq=f.catalog_seq))


def relayouts(f: Facts) -> int:
    """How many other layouts a create or expand may ask for after a failure past its retries:
    the request's `relayout`, else its template's `administration.relayout`, else none."""
    if not isinstance(f.command, (CreateCluster, ExpandCluster)):
        return 0
    if f.command.relayout is not None:
        return f.command.relayout
    name = f.command.template if isinstance(f.command, CreateCluster) else f.cluster.template if f.cluster else ""
    try:
        value = resolve_template(f.catalog, name).administration.get("relayout", 0)
    except TemplateError:  # refused by the operation's rules already
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_RELAYOUTS:
        raise Refused(f"template {name!r}: administration.relayout is {value!r}; give a whole number from 0 to {MAX_RELAYOUTS}",
                      code="invalid", field="template")
    return value


def new_cluster(f: Facts, cluster_id: str, owner: str, now: datetime) -> Cluster:
    """The cluster a create makes, with its lease from the template (and the request's
    `lease_s`) among its first events; none for a lease forever (`leases.py`)."""
    cmd: CreateCluster = f.command
    template = template_of(f)
    provider = provider_of(f)
    try:
        lease_terms = leases.terms_of(template.administration)
    except ValueError as err:
        raise Refused(f"template {cmd.template!r}: {err}", code="invalid", field="template") from None
    # Where the cluster's tasks go: the template's class, else the provider's, else the planner's.
    klass = template.defaults.provisionerclass or f.catalog.providers[provider].provisionerclass
    cluster = Cluster(ClusterRequested(tenant=f.tenant, cluster_id=cluster_id, name=cmd.name, template=cmd.template,
                                       provider=provider, config={**template.defaults.config, **cmd.config},
                                       job_id=f.job_id, provisioner_class=klass, owner=owner))
    lease = leases.initial(lease_terms, cmd.lease_s, now)
    cluster.change_lease(lease.expires_at, lease.max_at, lease.step_s, owner)
    return cluster


def solver_catalog(catalog: Catalog) -> dict[str, Any]:
    """What a solver needs, without provider fields (which may hold plugin settings)."""
    data = catalog.model_dump(mode="json", include={"hardwaretypes", "imagetypes", "services", "clustertemplates", "partialtemplates"})
    data["providers"] = {n: {"name": p.name, "providertype": p.providertype} for n, p in catalog.providers.items()}
    return data


def layout_request(job_id: str, cluster: Cluster, catalog: Catalog, cmd: Any) -> LayoutRequested:
    """What the solver is asked for an operation that changes the layout."""
    if isinstance(cmd, CreateCluster):
        template = resolve_template(catalog, cmd.template)
        return LayoutRequested(
            job_id=job_id, cluster_id=str(cluster.id), template=cmd.template, nodes=cmd.nodes,
            services=list(cmd.services if cmd.services is not None else template.defaults.services),
            provider=cluster.provider, hardwaretype=cmd.hardwaretype, imagetype=cmd.imagetype,
            catalog=solver_catalog(catalog),
        )
    nodes = list(cluster.nodes.values())
    total = cmd.nodes if isinstance(cmd, (ExpandCluster, ShrinkCluster)) else len(nodes)
    return LayoutRequested(
        job_id=job_id, cluster_id=str(cluster.id), template=cluster.template, nodes=total,
        services=sorted({s for n in nodes for s in n.services}), provider=cluster.provider,
        existing=resize.layout_of(nodes),
        add_services=list(cmd.services) if isinstance(cmd, AddServices) else [],
        remove_services=list(cmd.services) if isinstance(cmd, RemoveServices) else [],
        catalog=solver_catalog(catalog),
    )


def command_field(cmd: Any, fields: Iterable[str]) -> str | None:
    """The command's field a solver's answer is about (its `fields` name the layout request's):
    an add or a removal of services is the command's `services`; so is a create's; the
    existing cluster's `services` (another operation's request) is no field the command has."""
    for field in fields:
        if field in ("add_services", "remove_services") or (field == "services" and isinstance(cmd, CreateCluster)):
            return "services"
    return None


def layout_request_of(job: Job, cluster: Cluster, catalog: Catalog) -> LayoutRequested:
    """The job's request for its current layout round: the first (`round` 0), or another one
    excluding every layout tried (`JobLayoutRetried`)."""
    request = layout_request(str(job.id), cluster, catalog, COMMAND_ADAPTER.validate_python(job.request))
    return request.model_copy(update={"exclude": list(job.tried_layouts), "round": job.layout_round})


def node_factory(cluster: Cluster, catalog: Catalog, existing: list[NodeSpec]) -> resize.NodeFactory:
    return catalog_node_factory(cluster.name, cluster.provider, catalog, existing)


def catalog_node_factory(name: str, provider: str, catalog: Catalog, existing: list[NodeSpec]) -> resize.NodeFactory:
    """New nodes of a cluster named `name` on `provider`, their flavor and image from the catalog."""
    flavors = {n: hw.flavor(provider) or "" for n, hw in catalog.hardwaretypes.items()}
    images = {n: (img.image(provider) or "", img.providermap.get(provider, {}).get("sshuser", "")) for n, img in catalog.imagetypes.items()}
    return resize.NodeFactory(name, provider, existing, flavors, images)


def plan_layout(job: Job, cluster: Cluster, catalog: Catalog, layout: Layout, cmd: Any) -> tuple[Plan, list[NodeSpec]]:
    """The plan of a layout-changing operation, and the cluster's nodes after it."""
    current = list(cluster.nodes.values())
    op = job.operation
    stopped = cluster.stopped_pairs()  # no start thrown in for them (`build_plan`)
    if op in ("create", "expand"):
        change = resize.expand(current, layout, node_factory(cluster, catalog, current))
        plan = build_plan(catalog.services, change.nodes, op, node_ids=None if op == "create" else change.planned,
                          config=cluster.config, stopped=stopped)
    elif op == "shrink":
        change = resize.shrink(current, layout)
        plan = build_plan(catalog.services, current, op, node_ids=change.planned)
    elif op == "add-services":
        change = resize.add_services(current, layout, cmd.services)
        plan = build_plan(catalog.services, change.nodes, op, services=cmd.services, node_ids=change.planned, stopped=stopped)
    else:  # remove-services
        change = resize.remove_services(current, cmd.services)
        plan = build_plan(catalog.services, current, op, services=cmd.services, node_ids=change.planned)
    return plan, list(change.nodes)


def plan_direct(job: Job, cluster: Cluster, catalog: Catalog, cmd: Any) -> tuple[Plan, list[str]]:
    """Operations that change no layout: planned on the cluster as it is; with the notes the
    request's answer and its dry run give (a restart: what it leaves stopped)."""
    if isinstance(cmd, RepairCluster):
        return observed.repair_plan(catalog.services, cluster), []
    services: Sequence[str] | None = None
    if isinstance(cmd, (StartServices, StopServices, RestartServices, CheckCluster)):
        services = cmd.services
    elif isinstance(cmd, UpgradeService):
        services = [cmd.service]
    nodes = getattr(cmd, "nodes", None)  # start, stop, restart, configure: only these nodes' tasks
    node_ids = sorted(set(nodes)) if nodes else None
    if job.operation in KEEPS_STOPPED:
        return keep_stopped(catalog.services, list(cluster.nodes.values()), job.operation, services, node_ids,
                            cluster.stopped_pairs()), []
    if job.operation == "restart":
        plan, left = restart_what_runs(catalog.services, list(cluster.nodes.values()), services, node_ids, cluster.stopped_pairs())
        return plan, [left_stopped(cluster.name, left)] if left else []
    return build_plan(catalog.services, list(cluster.nodes.values()), job.operation, services=services, node_ids=node_ids,
                      stopped=cluster.stopped_pairs()), []


KEEPS_STOPPED = {"configure-restart": "configure", "upgrade": "repair-install"}
"""Operations that stop and start what they change, and what they run instead where a service
is meant to be stopped (the user's `stop`): configure it; install and configure it."""


def keep_stopped(services: Mapping[str, Service], nodes: list[NodeSpec], operation: str, names: Sequence[str] | None,
                 node_ids: Sequence[str] | None, stopped: Collection[Pair]) -> Plan:
    """A configure with a restart or an upgrade: the services meant to run are changed and
    restarted, those meant to be stopped (`stopped`) changed only (`KEEPS_STOPPED`), in a phase
    after, so they stay stopped (it started every one of them, and made them meant to run), as a
    repair and a rollback to a job treat them. Without any, the plain plan, as before. A
    restarted service that needs one kept stopped (on any node) starts without it, as it ran
    (`build_plan`'s `stopped`): before session 36 its start was thrown in, and the job left it
    running and meant to run (decision 53)."""
    planned = {(n.id, s) for n in nodes if node_ids is None or n.id in node_ids for s in n.services if names is None or s in names}
    rest = planned & set(stopped)
    if not rest:
        return build_plan(services, nodes, operation, services=names, node_ids=node_ids, stopped=stopped)
    return chain_phases([*exact(services, nodes, operation, planned - rest, stopped),
                         *exact(services, nodes, KEEPS_STOPPED[operation], rest, stopped)])


def restart_what_runs(services: Mapping[str, Service], nodes: list[NodeSpec], names: Sequence[str] | None,
                      node_ids: Sequence[str] | None, stopped: Collection[Pair]) -> tuple[Plan, list[Pair]]:
    """A restart's plan, and the pairs it leaves stopped: those meant to be stopped (the user's
    `stop`) whose service the request does not name, which a restart of everything, or the
    restart of what needs a named service, would otherwise start (`systemctl restart` of what
    runs, not a start). A named service is restarted wherever it is, stopped or not: naming it
    is the way to start it again with the rest (`muster cluster start` the other). Before
    session 37 a plain `restart` started every service the user had stopped, and they were meant
    to run from then on (decision 53)."""
    plan = build_plan(services, nodes, "restart", services=names, node_ids=node_ids, stopped=stopped)
    named = set(names or ())
    left = sorted({(t.node, t.service) for t in plan.tasks if t.service and t.service not in named} & set(stopped))
    if not left:
        return plan, []
    rest = {(t.node, t.service) for t in plan.tasks if t.service} - set(left)
    if not rest:
        raise PlanError(f"nothing to restart: every service it would restart is stopped ({_by_service(left)}); "
                        "`muster cluster start` starts them, or name them to restart them", field="services")
    return build_plan(services, nodes, "restart", pairs=rest, stopped=stopped), left


def left_stopped(cluster: str, pairs: Sequence[Pair]) -> str:
    """The note of a restart that leaves services stopped (the request's answer, its dry run):
    each service with the nodes it stays stopped on."""
    services = sorted({s for _, s in pairs})
    return (f"the restart leaves stopped what was stopped (`muster cluster stop`): {_by_service(pairs)}; `muster cluster "
            f"start {cluster} {' '.join(services)}` starts them, or name them to the restart")


def _by_service(pairs: Sequence[Pair]) -> str:
    on: dict[str, list[str]] = {}
    for node, service in pairs:
        on.setdefault(service, []).append(node)
    return "; ".join(f"{s} on {', '.join(sorted(nodes))}" for s, nodes in sorted(on.items()))


def rolled(plan: Plan, cmd: Any, cluster: Cluster | None = None, catalog: Catalog | None = None) -> tuple[Plan, list[list[str]], int]:
    """A rolling change's plan (`rolling.py`), its batches and its failure tolerance; other
    plans as they are. A repair's nodes where it only brings services up go first (with the
    cluster and catalog it was planned on)."""
    spec = getattr(cmd, "rolling", None)
    if spec is None:
        return plan, [], 0
    first: set[str] = set()
    if isinstance(cmd, RepairCluster) and cluster is not None and catalog is not None:
        first = observed.up_first(catalog.services, cluster)
    done = rolling.batched(plan, spec.batch, first)
    return done.plan, done.batches, spec.tolerance


def planned(job: Job, cluster: Cluster, plan: Plan, target: list[NodeSpec], mode: str,
            batches: list[list[str]] | None = None, tolerance: int = 0, stopped: list[str] | None = None,
            stopped_on: dict[str, list[str]] | None = None) -> JobPlanned:
    """The event recording a plan, with the state it starts from (a later rollback's target).
    `stopped`, `stopped_on`: a rollback's desired state once it succeeds."""
    compact = plan.to_compact_json()
    return JobPlanned(
        job_id=str(job.id), mode=mode,  # type: ignore[arg-type]
        tasks=[PlannedTaskRecord(id=t.id, node=t.node, action=t.action, service=t.service) for t in plan.tasks],
        links=compact["links"], stages=compact["stages"], thrown_in=compact["thrown_in"],
        nodes=target, previous_nodes=list(cluster.nodes.values()), previous_config=cluster.config,
        previous_stopped=list(cluster.stopped), previous_stopped_on=dict(cluster.stopped_on), stopped=stopped,
        stopped_on=stopped_on if stopped is not None else None, batches=batches or [], tolerance=tolerance,
    )
