"""The planner's NATS adapters (the log and task queue adapters are `muster.bus`)."""

from __future__ import annotations

import json

from nats.aio.client import Client

from contracts import subjects
from contracts.events import LayoutRequested
from contracts.layout import Layout
from muster.bus.connect import principal_of

from .ports import NoLayout, SolverUnavailable


class NatsWorkers:
    """Live provisioners, from their presence records (one direct get, no consumer)."""

    def __init__(self, nc: Client, timeout: float = 3.0) -> None:
        self.nc, self.timeout = nc, timeout

    async def serving(self, tenant: str, provisioner_class: str) -> int | None:
        from services.provisioner.presence import live_provisioners

        try:
            live = await live_provisioners(self.nc, tenant=tenant, provisioner_class=provisioner_class, timeout=self.timeout)
        except Exception:  # noqa: BLE001 - a warning we cannot give is no reason to refuse
            return None
        return sum(not p.draining for p in live)


class NatsSolver:
    """Dry runs: the solvers' request/reply subject (`muster.q.<tenant>.<principal>.solve`)."""

    def __init__(self, nc: Client, timeout: float) -> None:
        self.nc, self.timeout = nc, timeout

    async def solve(self, tenant: str, request: LayoutRequested) -> Layout:
        try:
            subject = subjects.solve_request(tenant, principal_of(self.nc))
            reply = await self.nc.request(subject, request.model_dump_json().encode(), timeout=self.timeout)
        except Exception as err:  # noqa: BLE001 - no solver running, it timed out, or the connection failed
            raise SolverUnavailable(type(err).__name__) from None
        answer = json.loads(reply.data)
        if answer.get("type") != "LayoutSolved":
            raise NoLayout(answer.get("message", answer))
        return Layout.model_validate(answer["layout"])
