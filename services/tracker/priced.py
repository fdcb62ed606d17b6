"""A job's costs as its reader may see them, wherever the tracker answers a job: `GET /v1/jobs/{id}`
(`muster status`), `GET /v1/jobs/{id}/events`, `GET /v1/events` and the console's job page.

The prices of hardware types the reader may not `read` (`catalog:hardwaretypes/<name>`) are taken
out as `muster.readmodel.priced` says; the job's nodes and their types come from its plan in the
log (`JobPlanned`: the cluster once done and before), read once per job (`Plans`). The progress
stream carries no cost.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from contracts import subjects
from contracts.identity import Scope
from contracts.records import Recorded
from muster.ports.eventlog import EventLog
from muster.readmodel.priced import COSTS, Hidden, approval_shown, masked

PRICED_EVENTS = ("JobApprovalRequested", "JobApproved")
"""The events that record a plan's cost (`cost`)."""


def hidden_by(may: Callable[..., Any], tenant: str) -> Hidden:
    """The hardware types whose price a reader with `may` (the API's `Authz.may`) is not shown."""
    return lambda name: not may("read", Scope(tenant=tenant, kind="catalog", id=f"hardwaretypes/{name}"))


Planned = tuple[dict[str, str], list[str]]
"""A job's nodes once done (id -> hardware type) and the hardware types of those before."""


def first_plan(records: Iterable[Recorded]) -> Planned | None:
    """The nodes of the job's first plan among its events (a job waiting for approval is planned
    once: another layout needs another approval); None before it is planned."""
    for r in records:
        if r.type == "JobPlanned":
            return {n.id: n.hardwaretype for n in r.event.nodes}, [n.hardwaretype for n in r.event.previous_nodes]
    return None


async def planned_nodes(store: EventLog, tenant: str, job_id: str) -> Planned:
    """The nodes of the job's first plan, from the log (none before it is planned)."""
    return first_plan(await store.read(subjects.job_events(tenant, job_id))) or ({}, [])


def has_cost(status: dict[str, Any]) -> bool:
    """Does the job's answer carry a plan's cost (its approval's)?"""
    approval = status.get("approval") or {}
    return any(approval.get(k) for k in COSTS)


class Plans:
    """The nodes of the jobs' first plans, kept for the jobs last answered: a job's first
    `JobPlanned` never changes once in the log, and each answer of a job with a cost (a waiting
    job's `muster status`, its console page, its events) read and decoded it again, a 10,000-node
    plan's 110,000 tasks included (1.6 s an answer: docs/benchmarks.md). Bounded by jobs and by
    nodes held."""

    def __init__(self, store: EventLog, most: int = 256, most_nodes: int = 200_000) -> None:
        self.store, self.most, self.most_nodes = store, most, most_nodes
        self._held: OrderedDict[tuple[str, str], Planned] = OrderedDict()
        self.nodes = 0

    async def of(self, tenant: str, job_id: str) -> Planned:
        held = self._held.get((tenant, job_id))
        if held is not None:
            self._held.move_to_end((tenant, job_id))
            return held
        planned = await planned_nodes(self.store, tenant, job_id)
        self._keep((tenant, job_id), planned)
        return planned

    def seen(self, tenant: str, job_id: str, records: Iterable[Recorded]) -> None:
        """The job's events, read already for its answer (from the log): its plan is kept from them."""
        if (tenant, job_id) not in self._held:
            self._keep((tenant, job_id), first_plan(records) or ({}, []))

    def _keep(self, key: tuple[str, str], planned: Planned) -> None:
        size = len(planned[0]) + len(planned[1])
        if not size or size > self.most_nodes:  # (not yet planned: its plan may come)
            return
        while self._held and (len(self._held) >= self.most or self.nodes + size > self.most_nodes):
            _, (target, previous) = self._held.popitem(last=False)
            self.nodes -= len(target) + len(previous)
        self._held[key] = planned
        self.nodes += size


async def status_shown(plans: Plans, tenant: str, job_id: str, status: dict[str, Any], hidden: Hidden) -> dict[str, Any]:
    """A job's status with its approval's costs as the reader is shown them."""
    if not has_cost(status):
        return status
    target, previous = await plans.of(tenant, job_id)
    return {**status, "approval": approval_shown(status["approval"], hidden, target, previous)}


async def events_shown(plans: Plans, tenant: str, job_id: str, items: Sequence[dict[str, Any]],
                       hidden: Hidden) -> list[dict[str, Any]]:
    """A page of the job's events (`event_json`) with the costs they record as the reader is shown them."""
    if not any(i.get("type") in PRICED_EVENTS and (i.get("event") or {}).get("cost") for i in items):
        return list(items)
    target, previous = await plans.of(tenant, job_id)
    return [{**i, "event": {**i["event"], "cost": masked(i["event"]["cost"], hidden, target, previous)}}
            if i.get("type") in PRICED_EVENTS and i["event"].get("cost") else i for i in items]
