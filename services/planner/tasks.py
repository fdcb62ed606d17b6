"""Build the message a provisioner receives for one task attempt (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from contracts.catalog import Action, Catalog
from contracts.tasks import NodeInfo, ProviderRef, ServiceRef, TaskMessage

from .domain.cluster import Cluster
from .domain.job import UNDO, Job


def node_info(cluster: Cluster, catalog: Catalog, node_id: str) -> NodeInfo:
    node = cluster.nodes[node_id]
    automators = sorted(
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
_NODES_CACHE: dict[tuple[str, int], dict[str, NodeInfo]] = {}


def nodes_map(cluster: Cluster, catalog: Catalog) -> dict[str, NodeInfo]:
    """Every node of the cluster, computed once per cluster version (a create of N nodes
    sends O(N) tasks; rebuilding the map for each would be O(N^2))."""
    key = (str(cluster.id), cluster.version)
    found = _NODES_CACHE.get(key)
    if found is None:
        if len(_NODES_CACHE) > 64:
            _NODES_CACHE.clear()
        found = _NODES_CACHE[key] = {n: node_info(cluster, catalog, n) for n in sorted(cluster.nodes)}
    return found


def task_message(
    job: Job, cluster: Cluster, catalog: Catalog, task_id: str, attempt: int, provisioner_class: str,
    timeouts: Mapping[str, float] | None = None,
    avoid: Sequence[str] = (),
) -> TaskMessage:
    task = job.tasks[task_id]
    action = Action(task["action"])
    service = None
    if task["service"]:
        definition = catalog.services[task["service"]].provisioner.actions[action]
        service = ServiceRef(name=task["service"], action=definition)
    undoing = task_id.startswith(UNDO)
    # A rollback's configure puts back the config the job replaced.
    config = job.previous_config if undoing and action is Action.CONFIGURE and job.previous_config else cluster.config
    provider = catalog.providers[cluster.provider]
    return TaskMessage(
        tenant=job.tenant,
        cluster_id=str(cluster.id),
        job_id=str(job.id),
        task_id=task_id,
        attempt=attempt,
        action=action,
        provisioner_class=provisioner_class,
        node=node_info(cluster, catalog, task["node"]),
        service=service,
        # Sensitive fields never reach the catalog in the log (docs/secrets.md), so every
        # field here may travel.
        provider=ProviderRef(name=provider.name, providertype=provider.providertype, fields=provider.provisioner),
        results=cluster.results.get(task["node"], {}),
        # Providers create and delete machines; only automators need the cluster's topology.
        nodes={} if action in PROVIDER_ACTIONS else nodes_map(cluster, catalog),
        config=config,
        timeout_s=(timeouts or {}).get(action.value, (timeouts or {}).get("default", 600.0)),
        avoid=list(avoid) if attempt > 1 else [],
    )
