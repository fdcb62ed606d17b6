"""The planner's NATS adapters (the log and task queue adapters are `muster.bus`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

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

from .domain import sessions
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

    def reconfigure(self, allowed: Allowed) -> None:
        """The operator's allow file read again (SIGHUP: muster/allowfile.py)."""
        self.allowed = allowed

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
        self.sessions = Sessions()

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


    async def ended(self, tenant: str, provisioners: set[str]) -> dict[str, int]:
        """For each of `provisioners`, the log sequence before which its claims were made by a
        process that has stopped (docs/decisions/0054), from what the presence bucket's leader
        holds (a follower may lag behind a renewal) and the TTLs the sessions registered with
        on the tenant's log (`domain/sessions.py`; a wait still to run is 0 now, and the planner
        asks again then, `Sessions.ask_again`):
        - no record (expired or deleted) of an id registered here (a provisioner of this muster:
          it keeps a lease): past every claim (`ALL`), once the sessions the last one replaced
          must have stopped too (`_all_stopped`);
        - its current session's registration, when that session's record has been there long
          enough for every other session the watch saw to have stopped (`Sessions.settled`) and
          the planner's first sight of the id is older than the TTL of each earlier session
          registered here (one replaced before the planner looked);
        - else 0. One never registered (a bare worker) is not known to have stopped. Raises
        when the bucket or the log cannot be read."""
        from services.provisioner.presence import KV_STREAM, KV_SUBJECT_PREFIX, is_record, presence_key

        if self.log is None:
            return {}
        js = self.nc.jetstream()
        out: dict[str, int] = {}
        for pid in sorted(provisioners):
            try:
                last = await js.get_last_msg(KV_STREAM, KV_SUBJECT_PREFIX + presence_key(pid))
            except NotFoundError:
                last = None
            live = last is not None and is_record(last.headers, last.data)
            if live:
                self.sessions.gone_found.pop(pid, None)
            settled = self.sessions.settled.get(pid)
            if live and settled is None:
                out[pid] = 0
                continue
            history = [sessions.Registered(r.seq, r.event.provisioner.session, r.event.ttl_s) if r.type == "ProvisionerRegistered"
                       else sessions.Deregistered(r.event.session)
                       for r in await self.log.read(subjects.provisioner_events(tenant, pid))
                       if r.type in ("ProvisionerRegistered", "ProvisionerDeregistered")]
            if not live:
                out[pid] = self._all_stopped(tenant, pid, history)
                continue
            assert last is not None
            session = ProvisionerPresence.model_validate_json(last.data or b"").info.session
            stopped = sessions.earlier_stopped(history, session, self.sessions.first_seen.get(pid, 0.0))
            if session != settled or not stopped.since:
                out[pid] = 0
            elif stopped.at > asyncio.get_running_loop().time():
                out[pid] = 0
                self.sessions.ask_again(pid, tenant, stopped.at)
            else:
                out[pid] = stopped.since
        return out

    def _all_stopped(self, tenant: str, pid: str, history: list[sessions.Registered | sessions.Deregistered]) -> int:
        """`ALL` for a registered id whose record the leader no longer holds, once its sessions
        that the last writer replaced must have stopped too (their TTLs may be longer than the
        last one's, whose expiry the leader shows); until then 0, asking again then."""
        if not any(isinstance(r, sessions.Registered) for r in history):
            return 0
        watch, now = self.sessions, asyncio.get_running_loop().time()
        if watch.watching_since is None:
            # No watch (yet): when the last writer's record was last there is not known, but every
            # session registered here was replaced or stopped before the record was first found
            # gone, so each has stopped a TTL after that (the last writer's own counted too).
            at = sessions.earlier_stopped(history, None, watch.gone_found.setdefault(pid, now)).at
            if at > now:
                watch.ask_again(pid, tenant, at)
                return 0
            return ALL
        if pid in watch.current:  # the watch has not seen it go yet: asked again when it does
            return 0
        last, seen_at = watch.last.get(pid, (None, watch.watching_since))
        at = sessions.earlier_stopped(history, last, seen_at).at
        if at > asyncio.get_running_loop().time():
            watch.ask_again(pid, tenant, at)
            return 0
        return ALL


ALL = 2**63
"""Every claim: its provisioner is gone."""


class Sessions:
    """Each provisioner's current session, from the presence bucket's watch, and whether that
    session's record has been there long enough that every other process of its id has
    stopped: such a process can renew the record no more once the new session wrote it (each
    writes only over its own last record), so its lease lapses within its TTL (decision 54).
    Its TTL is the largest this planner saw for the id, or the largest allowed for an id first
    seen now (whose earlier sessions it never saw). A session replaced before the planner first
    saw the id may have had a longer TTL than any seen: `NatsWorkers.ended` waits for it too,
    from `first_seen` (`domain/sessions.py`), and asks again then (`ask_again`)."""

    def __init__(self) -> None:
        self.current: dict[str, str] = {}
        self.settled: dict[str, str] = {}
        self.first_seen: dict[str, float] = {}
        """When the watch first saw each id's record (the event loop's clock)."""
        self.last: dict[str, tuple[str, float]] = {}
        """Each id's last session the watch saw, and when it first saw it (kept once it goes)."""
        self.watching_since: float | None = None
        """When the watch had read the records there were (None: not watching yet)."""
        self.gone_found: dict[str, float] = {}
        """Without a watch: when `NatsWorkers.ended` first found each id's record gone."""
        self.on_settled: Callable[[str], None] | None = None
        self._ttl: dict[str, float] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._again: dict[tuple[str, str], asyncio.TimerHandle] = {}

    def seen(self, pid: str, record: ProvisionerPresence | None) -> None:
        from services.provisioner.presence import MAX_TTL_S

        if record is None:
            self.current.pop(pid, None)
            self.settled.pop(pid, None)
            self._cancel(pid)
            return
        session = record.info.session
        self.first_seen.setdefault(pid, asyncio.get_running_loop().time())
        if self.current.get(pid) == session:
            self._ttl[pid] = max(self._ttl.get(pid, 0.0), record.ttl_s)
            return
        wait = max(self._ttl.get(pid, float(MAX_TTL_S)), record.ttl_s)
        self._ttl[pid] = max(self._ttl.get(pid, 0.0), record.ttl_s)
        self.current[pid] = session
        self.last[pid] = (session, asyncio.get_running_loop().time())
        self.settled.pop(pid, None)
        self._cancel(pid)
        self._timers[pid] = asyncio.get_running_loop().call_later(wait, self._settle, pid, session)

    def ask_again(self, pid: str, tenant: str, at: float) -> None:
        """`on_settled(pid)` at `at` (the event loop's clock), when the earlier sessions of the
        id that registered on `tenant`'s log must have stopped: the cancelled jobs that wait for
        their claims are closed again then. Armed from what `ended` read on the log, each time it
        reads it; the last asked for a tenant stands."""
        old = self._again.pop((pid, tenant), None)
        if old is not None:
            old.cancel()

        def due() -> None:
            self._again.pop((pid, tenant), None)
            if self.on_settled is not None:
                self.on_settled(pid)

        self._again[(pid, tenant)] = asyncio.get_running_loop().call_at(at, due)

    def close(self) -> None:
        for pid in list(self._timers):
            self._cancel(pid)
        for timer in self._again.values():
            timer.cancel()
        self._again.clear()

    def _settle(self, pid: str, session: str) -> None:
        self._timers.pop(pid, None)
        if self.current.get(pid) == session:
            self.settled[pid] = session
            if self.on_settled is not None:
                self.on_settled(pid)

    def _cancel(self, pid: str) -> None:
        timer = self._timers.pop(pid, None)
        if timer is not None:
            timer.cancel()


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
            raise NoLayout(str(answer.get("message", answer)), tuple(map(str, answer.get("fields") or ())))
        return Layout.model_validate(answer["layout"])
