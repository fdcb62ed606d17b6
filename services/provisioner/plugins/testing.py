"""Build task messages for plugin tests (ours and those of plugin authors)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from contracts.catalog import Action, ServiceAction
from contracts.tasks import NodeInfo, ProviderRef, ServiceRef, TaskMessage, TaskOutcome


def make_task(
    action: Action | str,
    *,
    providertype: str = "simulated",
    provider_name: str = "sim",
    provider_fields: Mapping[str, Any] | None = None,
    service: str | None = None,
    automator: str = "simulated",
    action_fields: Mapping[str, str] | None = None,
    automators: list[str] | None = None,
    results: Mapping[str, Any] | None = None,
    ipaddresses: Mapping[str, str] | None = None,
    config: Mapping[str, Any] | None = None,
    cluster_id: str = "c1",
    node_id: str = "n1",
    hostname: str = "node-1.example",
    task_id: str | None = None,
    attempt: int = 1,
    timeout_s: float = 30,
    tenant: str = "t1",
) -> TaskMessage:
    action = Action(action)
    node = NodeInfo(
        id=node_id,
        hostname=hostname,
        nodenum=1000,
        hardwaretype="small",
        imagetype="ubuntu22",
        services=[service] if service else [],
        automators=list(automators if automators is not None else [automator]),
        ipaddresses=dict(ipaddresses or {}),
    )
    svc = (
        ServiceRef(name=service, action=ServiceAction(type=automator, fields=dict(action_fields or {})))
        if service
        else None
    )
    return TaskMessage(
        tenant=tenant,
        cluster_id=cluster_id,
        job_id=f"{cluster_id}-j1",
        task_id=task_id or f"{cluster_id}-{node_id}-{action.value}",
        attempt=attempt,
        action=action,
        node=node,
        service=svc,
        provider=ProviderRef(name=provider_name, providertype=providertype, fields=dict(provider_fields or {})),
        results=dict(results or {}),
        nodes={node_id: node},
        config=dict(config or {}),
        timeout_s=timeout_s,
    )


def merge_outcome(task: TaskMessage, outcome: TaskOutcome) -> tuple[dict[str, Any], dict[str, str]]:
    """What the planner does with a successful outcome: (node results, node ipaddresses)."""
    results = {**task.results, **outcome.result}
    ips = {**task.node.ipaddresses, **outcome.ipaddresses} if outcome.ipaddresses else dict(task.node.ipaddresses)
    return results, ips


def next_task(previous: TaskMessage, outcome: TaskOutcome, action: Action | str, **overrides: Any) -> TaskMessage:
    """The node's next task, carrying the results of `outcome` as the planner would."""
    results, ips = merge_outcome(previous, outcome)
    node = previous.node.model_copy(update={"ipaddresses": ips})
    action = Action(action)
    update: dict[str, Any] = {
        "action": action,
        "results": results,
        "node": node,
        "nodes": {**previous.nodes, node.id: node},
        "task_id": f"{previous.cluster_id}-{node.id}-{action.value}",
        "attempt": 1,
    }
    update.update(overrides)
    return previous.model_copy(update=update)


def service_task(node: TaskMessage, action: Action | str, script: str, *, automator: str = "shell", service: str = "svc", **fields: str) -> TaskMessage:
    """A service action on the node that `node` (a task carrying its results) describes."""
    action = Action(action)
    return node.model_copy(
        update={
            "action": action,
            "task_id": f"{node.cluster_id}-{node.node.id}-{action.value}",
            "service": ServiceRef(name=service, action=ServiceAction(type=automator, fields={"script": script, **fields})),
        }
    )


async def made_node(registry: Any, create: TaskMessage, then: Action | str = "bootstrap") -> TaskMessage:
    """Run a node's create and confirm through a registry (both must succeed): its `then` task,
    carrying the node's results as the planner would."""
    created = await registry.execute(create)
    assert created.ok, created.error
    confirm = next_task(create, created, "confirm")
    confirmed = await registry.execute(confirm)
    assert confirmed.ok, confirmed.error
    return next_task(confirm, confirmed, then)


NodeFactory = Callable[..., Awaitable[TaskMessage]]
"""Makes a created and confirmed node; returns a task carrying its results (test fixtures)."""


async def process_exited(pid: int, timeout: float) -> None:
    """Wait for any process (not only a child) to exit, event-driven via a pidfd, with a deadline."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    gone: asyncio.Future[None] = loop.create_future()
    loop.add_reader(fd, lambda: None if gone.done() else gone.set_result(None))
    try:
        await asyncio.wait_for(gone, timeout)
    finally:
        loop.remove_reader(fd)
        os.close(fd)
