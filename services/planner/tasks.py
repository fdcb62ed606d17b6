"""Build the message a provisioner receives for one task attempt (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contracts import subjects
from contracts.catalog import Action, Catalog
from contracts.tasks import NodeInfo, ProviderRef, ServiceRef, TaskMessage

from .domain.cluster import Cluster
from .domain.job import UNDO, Job

_NODE, _AUTOMATORS = object(), object()
"""Keys of a memo's entries (never equal to the names `task_message` keeps there)."""


def node_info(cluster: Cluster, catalog: Catalog, node_id: str, memo: dict[Any, Any] | None = None) -> NodeInfo:
    """A node as a plugin sees it. `memo`: shared by the calls of one state of the cluster and
    catalog (a wave's messages, a nodes map), where a node's steps of a segment, and nodes of
    the same services, would each build the same again."""
    if memo is None:
        return _node_info(cluster, catalog, node_id, {})
    found: NodeInfo | None = memo.get((_NODE, node_id))
    if found is None:
        found = memo[(_NODE, node_id)] = _node_info(cluster, catalog, node_id, memo)
    return found


def _node_info(cluster: Cluster, catalog: Catalog, node_id: str, memo: dict[Any, Any]) -> NodeInfo:
    node = cluster.nodes[node_id]
    services = (_AUTOMATORS, *node.services)
    automators = memo.get(services)
    if automators is None:
        automators = memo[services] = sorted(
            {
                action.type
                for name in node.services
                if name in catalog.services
                for action in catalog.services[name].provisioner.actions.values()
            }
        )
    return NodeInfo(
        id=node.id,
        hostname=cluster.hostname(node_id),
        nodenum=node.nodenum,
        hardwaretype=node.hardwaretype,
        imagetype=node.imagetype,
        flavor=node.flavor,
        image=node.image,
        sshuser=node.sshuser,
        services=sorted(node.services),
        automators=automators,
        ipaddresses=cluster.ipaddresses.get(node_id, {}),
    )


PROVIDER_ACTIONS = frozenset({Action.CREATE, Action.CONFIRM, Action.DELETE})


def needs_nodes(action: Action | str) -> bool:
    """Providers create and delete machines; only automators need the cluster's topology."""
    return Action(action) not in PROVIDER_ACTIONS


def nodes_map(cluster: Cluster, catalog: Catalog) -> dict[str, NodeInfo]:
    """Every node of the cluster, as a plugin sees it (the planner stores it by reference:
    nodemaps.py; this is the same map, whole)."""
    memo: dict[Any, Any] = {}
    return {n: node_info(cluster, catalog, n, memo) for n in sorted(cluster.nodes)}


def _fence(job: Job, task_id: str, memo: dict[Any, Any]) -> str | None:
    """The subject of the cancel fence the attempt's claim must find empty (docs/decisions/0046)."""
    round_ = job.fence_round(task_id)
    if round_ is None:
        return None
    fence = memo.get(("fence", str(job.id), round_))
    if fence is None:
        fence = memo[("fence", str(job.id), round_)] = subjects.claims_closed(job.tenant, str(job.id), round_)
    return str(fence)


def task_message(
    job: Job, cluster: Cluster, catalog: Catalog, task_id: str, attempt: int, provisioner_class: str,
    timeouts: Mapping[str, float] | None = None,
    avoid: Sequence[str] = (),
    nodes_ref: str | None = None,
    shared: dict[Any, Any] | None = None,
) -> TaskMessage:
    """The message for one attempt. With `nodes_ref` (the key of the stored nodes map) the map
    travels by reference; without it, whole (what the provisioner puts back is the same).
    `shared`: a memo of the parts equal for many messages of one cluster and catalog (a wave
    of 10,000 builds its service and provider references once, not 10,000 times)."""
    task = job.tasks[task_id]
    action = task.action
    memo: dict[Any, Any] = shared if shared is not None else {}
    service = None
    if task.service:
        service = memo.get((task.service, action))
        if service is None:
            definition = catalog.services[task.service].provisioner.actions[action]
            service = memo[(task.service, action)] = ServiceRef(name=task.service, action=definition)
    undoing = task_id.startswith(UNDO)
    # A rollback's configure puts back the config the job replaced.
    config = job.previous_config if undoing and action is Action.CONFIGURE and job.previous_config else cluster.config
    provider_ref = memo.get(("provider", cluster.provider))
    if provider_ref is None:
        provider = catalog.providers[cluster.provider]
        provider_ref = memo[("provider", cluster.provider)] = ProviderRef(
            name=provider.name, providertype=provider.providertype, fields=provider.provisioner)
    return TaskMessage(
        tenant=job.tenant,
        cluster_id=str(cluster.id),
        job_id=str(job.id),
        task_id=task_id,
        attempt=attempt,
        action=action,
        provisioner_class=provisioner_class,
        node=node_info(cluster, catalog, task.node, memo),
        service=service,
        # Sensitive fields never reach the catalog in the log (docs/secrets.md), so every
        # field here may travel.
        provider=provider_ref,
        results=cluster.results.get(task.node, {}),
        nodes={} if not needs_nodes(action) or nodes_ref else nodes_map(cluster, catalog),
        nodes_ref=nodes_ref if needs_nodes(action) else None,
        config=config,
        cluster_owner=cluster.owner,
        fence=_fence(job, task_id, memo),
        timeout_s=(timeouts or {}).get(action.value, (timeouts or {}).get("default", 600.0)),
        avoid=list(avoid) if attempt > 1 else [],
    )
