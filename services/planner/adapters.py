"""The planner's NATS adapters (the log and task queue adapters are `muster.bus`)."""

from __future__ import annotations

import json

from nats.aio.client import Client

from contracts import subjects
from contracts.events import LayoutRequested
from contracts.layout import Layout

from .ports import NoLayout, SolverUnavailable


class NatsSolver:
    """Dry runs: the solvers' request/reply subject (`muster.q.<tenant>.solve`)."""

    def __init__(self, nc: Client, timeout: float) -> None:
        self.nc, self.timeout = nc, timeout

    async def solve(self, tenant: str, request: LayoutRequested) -> Layout:
        try:
            reply = await self.nc.request(subjects.solve_request(tenant), request.model_dump_json().encode(), timeout=self.timeout)
        except Exception as err:  # noqa: BLE001 - no solver running, it timed out, or the connection failed
            raise SolverUnavailable(type(err).__name__) from None
        answer = json.loads(reply.data)
        if answer.get("type") != "LayoutSolved":
            raise NoLayout(answer.get("message", answer))
        return Layout.model_validate(answer["layout"])
