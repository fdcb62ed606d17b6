"""The planner's NATS adapters (the log and task queue adapters are `muster.bus`)."""

from __future__ import annotations

import asyncio
import json

import structlog
from nats.aio.client import Client
from nats.js.errors import NotFoundError
from pydantic import ValidationError

from contracts import subjects
from contracts.events import LayoutRequested
from contracts.layout import Layout
from contracts.pool_commands import ANY_POOL, CheckCallback, PoolAnswer
from contracts.pools import Callback
from contracts.tasks import HeldAttempts, ProvisionerPresence
from muster import tracing
from muster.bus.connect import principal_of
from muster.destinations import PLANNER, Allowed, refused_url
from muster.ports.eventlog import EventLog

from .ports import NoLayout, SolverUnavailable

log = structlog.get_logger("muster.planner")


class NatsCallbackCheck:
    """The pool service's check of a callback URL (`muster.pool.<principal>.any.check-callback`):
    the operator's rule of where callbacks may go is its setting. With no pool service to ask, the
    planner checks what needs no lookup with the same setting (`allowed`, from `muster up
    --webhook-allow` as the pool service's): the URL's form and an address it names; a name is
    left to the pool service, which resolves it where it connects from."""

    def __init__(self, nc: Client, allowed: Allowed | None = None, timeout: float = 5.0) -> None:
        self.nc, self.allowed, self.timeout = nc, allowed or Allowed(), timeout

    async def __call__(self, callback: Callback, tenant: str) -> tuple[str, str]:
        principal = principal_of(self.nc)
        body = CheckCallback(callback=callback, tenant=tenant, requested_by=principal).model_dump_json().encode()
        try:
            reply = await self.nc.request(subjects.pool_command(principal, ANY_POOL, "check-callback"), body, timeout=self.timeout)
            answer = json.loads(reply.data)
        except Exception as err:  # noqa: BLE001 - no pool service running, or it did not answer in time
            log.info("callback checked by the planner: no pool service answered", error=str(err) or type(err).__name__)
            return self.without_pool_service(callback, tenant)
        if answer.get("type") == "Rejected":
            return str(answer.get("reason") or "refused"), ""
        return "", PoolAnswer.model_validate(answer).message

    def without_pool_service(self, callback: Callback, tenant: str) -> tuple[str, str]:
        assert callback.url is not None
        problem, name = refused_url(callback.url, self.allowed.for_tenant(tenant), PLANNER)
        if problem or not name:
            return problem, ""
        return "", ("--callback: not checked whether its host resolves to a public address: no pool service answered; "
                    "the pool service checks it before every POST, and refuses it if its operator's rule does (docs/pools.md)")


class NatsWorkers:
    """Live provisioners, from their presence records (one direct get, no consumer)."""

    def __init__(self, nc: Client, timeout: float = 3.0, log_: EventLog | None = None) -> None:
        self.nc, self.timeout, self.log = nc, timeout, log_

    async def live(self) -> list[ProvisionerPresence] | None:
        from services.provisioner.presence import live_provisioners

        try:
            return await live_provisioners(self.nc, timeout=self.timeout)
        except Exception:  # noqa: BLE001 - a warning we cannot give is no reason to refuse
            return None

    async def holding(self) -> set[str] | None:
        from services.provisioner.presence import live_provisioners

        try:
            live = await live_provisioners(self.nc, timeout=self.timeout)
        except Exception as err:  # noqa: BLE001 - the caller falls back to what the log says
            log.warning("live provisioners unknown", error=str(err) or type(err).__name__)
            return None
        answers = await asyncio.gather(*(self.nc.request(subjects.provisioner_held(p.info.id), b"", timeout=self.timeout)
                                         for p in live), return_exceptions=True)
        held: set[str] = set()
        for p, answer in zip(live, answers, strict=True):
            if isinstance(answer, BaseException):  # gone since its last presence write, or stuck
                log.warning("a provisioner did not say what it holds", provisioner=p.info.id, error=type(answer).__name__)
                continue
            try:
                held.update(HeldAttempts.model_validate_json(answer.data).attempts)
            except ValidationError as err:
                log.warning("a provisioner's answer about what it holds is unreadable", provisioner=p.info.id, error=str(err)[:200])
        return held


    async def gone(self, tenant: str, provisioners: set[str]) -> set[str]:
        """Those of `provisioners` whose presence record the bucket's leader does not hold (it
        expired or was deleted; a follower may lag behind a renewal) and that registered on
        the tenant's log: a provisioner of this muster, which keeps a lease, so gone for good
        with what it held (docs/decisions/0054). One never registered (a bare worker) is not
        known to be gone. Raises when the bucket or the log cannot be read."""
        from services.provisioner.presence import KV_STREAM, KV_SUBJECT_PREFIX, presence_key

        if self.log is None:
            return set()
        js = self.nc.jetstream()
        out: set[str] = set()
        for pid in sorted(provisioners):
            try:
                last = await js.get_last_msg(KV_STREAM, KV_SUBJECT_PREFIX + presence_key(pid))
            except NotFoundError:
                last = None
            headers = (last.headers or {}) if last is not None else {}
            if last is not None and last.data and "KV-Operation" not in headers and "Nats-Marker-Reason" not in headers:
                continue  # its record is there: alive, or not yet known dead
            registrations = await self.log.read(subjects.provisioner_events(tenant, pid))
            if any(r.type == "ProvisionerRegistered" for r in registrations):
                out.add(pid)
        return out


class NatsSolver:
    """Dry runs: the solvers' request/reply subject (`muster.q.<tenant>.<principal>.solve`)."""

    def __init__(self, nc: Client, timeout: float) -> None:
        self.nc, self.timeout = nc, timeout

    async def solve(self, tenant: str, request: LayoutRequested) -> Layout:
        try:
            subject = subjects.solve_request(tenant, principal_of(self.nc))
            reply = await self.nc.request(subject, request.model_dump_json().encode(), timeout=self.timeout,
                                          headers=tracing.outgoing())
        except Exception as err:  # noqa: BLE001 - no solver running, it timed out, or the connection failed
            raise SolverUnavailable(type(err).__name__) from None
        answer = json.loads(reply.data)
        if answer.get("type") != "LayoutSolved":
            raise NoLayout(answer.get("message", answer))
        return Layout.model_validate(answer["layout"])
