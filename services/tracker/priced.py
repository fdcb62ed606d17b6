"""A job's costs as its reader may see them, wherever the tracker answers a job: `GET /v1/jobs/{id}`
(`muster status`), `GET /v1/jobs/{id}/events`, `GET /v1/events` and the console's job page.

The prices of hardware types the reader may not `read` (`catalog:hardwaretypes/<name>`) are taken
out as `muster.readmodel.priced` says; the job's nodes and their types come from its plan in the
log (`JobPlanned`: the cluster once done and before). The progress stream carries no cost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from contracts import subjects
from contracts.identity import Scope
from muster.ports.eventlog import EventLog
from muster.readmodel.priced import COSTS, Hidden, approval_shown, masked

PRICED_EVENTS = ("JobApprovalRequested", "JobApproved")
"""The events that record a plan's cost (`cost`)."""


def hidden_by(may: Callable[..., Any], tenant: str) -> Hidden:
    """The hardware types whose price a reader with `may` (the API's `Authz.may`) is not shown."""
    return lambda name: not may("read", Scope(tenant=tenant, kind="catalog", id=f"hardwaretypes/{name}"))


async def planned_nodes(store: EventLog, tenant: str, job_id: str) -> tuple[dict[str, str], list[str]]:
    """The job's nodes once done (id -> hardware type) and the hardware types of those before,
    from its first plan (a job waiting for approval is planned once: another layout needs
    another approval)."""
    for r in await store.read(subjects.job_events(tenant, job_id)):
        if r.type == "JobPlanned":
            return {n.id: n.hardwaretype for n in r.event.nodes}, [n.hardwaretype for n in r.event.previous_nodes]
    return {}, []


async def status_shown(store: EventLog, tenant: str, job_id: str, status: dict[str, Any], hidden: Hidden) -> dict[str, Any]:
    """A job's status with its approval's costs as the reader is shown them."""
    approval = status.get("approval")
    if not approval or not any(approval.get(k) for k in COSTS):
        return status
    target, previous = await planned_nodes(store, tenant, job_id)
    return {**status, "approval": approval_shown(approval, hidden, target, previous)}


async def events_shown(store: EventLog, tenant: str, job_id: str, items: Sequence[dict[str, Any]],
                       hidden: Hidden) -> list[dict[str, Any]]:
    """A page of the job's events (`event_json`) with the costs they record as the reader is shown them."""
    if not any(i.get("type") in PRICED_EVENTS and (i.get("event") or {}).get("cost") for i in items):
        return list(items)
    target, previous = await planned_nodes(store, tenant, job_id)
    return [{**i, "event": {**i["event"], "cost": masked(i["event"]["cost"], hidden, target, previous)}}
            if i.get("type") in PRICED_EVENTS and i["event"].get("cost") else i for i in items]
