"""A small typed async client: send operations, follow a job through its events.

    async with await MusterClient.connect("nats://127.0.0.1:4222") as client:
        reply = await client.create_cluster("c1", template="hadoop-small", nodes=5)
        if isinstance(reply, Accepted):
            final = await client.wait(reply.job_id)          # JobSucceeded, JobRolledBack...
        outcome = await client.run(ExpandCluster(cluster_id=reply.cluster_id, nodes=8))

Requests are idempotent: every operation carries a `request_id` (generated when the caller
gives none) and a request that times out or finds no planner is sent again with the same key,
so the planner maps the retry to the same job and never starts a second one.

Waiting never polls: it reads the job's subject with an ordered consumer (from the start, or
from just after a given sequence) and returns on the final event, so it cannot miss an outcome
that happened before it subscribed.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
from collections.abc import AsyncGenerator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy

from contracts import subjects
from contracts.commands import (
    REPLY_ADAPTER,
    VERB_OF,
    Accepted,
    Command,
    DryRun,
    LeaseExtended,
    Rejected,
)
from contracts.events import FINAL_JOB_EVENTS
from contracts.records import Recorded

from . import tracing
from .bus.bodies import Bodies
from .bus.connect import connect, principal_of
from .bus.eventstore import EventStore, inflate, recorded_from_msg
from .bus.wire import close_push
from .catalog.store import read_catalog
from .client_operations import Operations, Reply, new_request_id
from .readmodel.clusters import ClusterInfo
from .readmodel.observed import needs_catalog

__all__ = ["ClusterInfo", "MusterClient", "MusterError", "NoAnswer", "Outcome", "Reply", "RequestRejected", "default_user",
           "new_request_id"]

tracer = tracing.Tracer("muster.client")
RETRYABLE = (nats.errors.TimeoutError, nats.errors.NoRespondersError)
BACKOFF_CAP_S = 3.0
"""The longest pause between two tries of a request (0.2 s doubling up to this): uncapped, the
last of the soak's 12 tries would wait 410 s after a "no responders"."""
NO_PLANNER_WAIT_S = 6.0
"""How long a request is sent again while no planner is subscribed, its tries counted or not: a
deployment whose nats-server just restarted has its planners back in ~3 s (each waits out the
server's auth-callout timeout on its first try), and three tries gave up after 1.2 s, telling
the user "no planner is listening" of a deployment that was coming back (an operator's walk)."""


def _pause(attempt: int) -> float:
    return min(BACKOFF_CAP_S, 0.2 * 2**attempt)


class MusterError(Exception):
    """Base of the client's errors; the message is one sentence a person can act on."""


class RequestRejected(MusterError):
    def __init__(self, reply: Rejected, verb: str) -> None:
        self.reply = reply
        super().__init__(rejected_words(verb, reply))


def rejected_words(verb: str, reply: Rejected, named: Callable[[str], str] = str,
                   said: Callable[[str], str | None] = lambda field: None) -> str:
    """`<verb> rejected: <reason>`; a refusal of several problems, one line each with its field
    (joined on one line, where one ended and the next began was the reader's guess). `said`:
    how the command's user gave a field (`services` -> `--services`), when it was: a single
    refusal names it, `create rejected (--services): ...`."""
    if not reply.problems:
        where = said(reply.field) if reply.field else None
        return f"{verb} rejected{f' ({where})' if where else ''}: {named(reply.reason)}"
    listed = "".join(f"\n  {(said(p.field) if p.field else None) or p.field or 'request'}: {named(p.reason)}"
                     for p in reply.problems)
    return f"{verb} rejected, {len(reply.problems)} problems:{listed}"


class NoAnswer(MusterError):
    """No planner answered, after every retry."""


def default_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name in a bare container
        return "anonymous"


async def _quiet(*_: Any) -> None:
    return None


@dataclass(frozen=True)
class Outcome:
    """An accepted operation and how its job ended."""

    reply: Accepted
    final: Any
    """The final event: JobSucceeded, JobFailed, JobRolledBack or JobNeedsAttention."""

    @property
    def succeeded(self) -> bool:
        return self.final.type == "JobSucceeded"

    @property
    def reason(self) -> str:
        return str(getattr(self.final, "reason", ""))


class MusterClient(Operations):
    """Operations over the bus for one tenant (each call may name another)."""

    def __init__(
        self,
        nc: Client,
        owns_connection: bool = False,
        *,
        tenant: str = "default",
        requested_by: str | None = None,
        timeout: float = 10.0,
        attempts: int = 3,
    ) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self._bodies = Bodies(self.js)
        self._owns = owns_connection
        self.tenant = tenant
        self.requested_by = requested_by or default_user()
        self.timeout = timeout
        self.attempts = max(1, attempts)

    @classmethod
    async def connect(
        cls, url: str | None = None, *, connect_attempts: int | None = None, token: str | None = None,
        data_dir: Path | None = None, **options: Any
    ) -> MusterClient:
        """Connect to NATS (`url`, else $NATS_URL, else the URL `muster up` saved in `data_dir`,
        $MUSTER_DATA_DIR or ./.muster, else localhost) with `token` (else
        $MUSTER_TOKEN or a credentials file: muster.bus.connect). With `connect_attempts`, an
        unreachable server fails (nats.errors.NoServersError) instead of being waited for. A
        `tls://` URL is verified against $MUSTER_TLS_CA, else `data_dir`'s local CA (a `muster up
        --tls` deployment's), else the system's roots (muster.tls.context)."""
        extra: dict[str, Any] = {}
        if connect_attempts is not None:
            extra = {"max_reconnect_attempts": connect_attempts, "connect_timeout": 2, "error_cb": _quiet,
                     "disconnected_cb": _quiet}
        return cls(await connect(url, name="muster-client", token=token, data_dir=data_dir, **extra), owns_connection=True, **options)

    async def __aenter__(self) -> MusterClient:
        return self

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self._owns:
            await self.nc.drain()

    # -- sending ---------------------------------------------------------------------------

    async def send(self, tenant: str, command: Command, timeout: float = 10.0) -> Reply:
        """One request, one reply (no retry, the command as given)."""
        verb = VERB_OF[command.type]  # type: ignore[attr-defined]
        reply = await self.nc.request(subjects.operation(tenant, principal_of(self.nc), verb), command.model_dump_json().encode(),
                                      timeout=timeout, headers=tracing.outgoing())
        return REPLY_ADAPTER.validate_json(reply.data)

    async def send_raw(self, tenant: str, verb: str, body: bytes, timeout: float = 10.0) -> Reply:
        reply = await self.nc.request(subjects.operation(tenant, principal_of(self.nc), verb), body, timeout=timeout,
                                      headers=tracing.outgoing())
        return REPLY_ADAPTER.validate_json(reply.data)

    async def request(
        self, command: Command, *, tenant: str | None = None, timeout: float | None = None, attempts: int | None = None
    ) -> Reply:
        """Send with an idempotency key; on a timeout, when no planner answers, or when the
        planner answers that nobody could act for the cluster just then (`Rejected.retry`: its
        shard between owners), send again with the same key. Raises NoAnswer when every attempt
        went unanswered; returns the last `retry` rejection if every attempt got one."""
        update: dict[str, Any] = {}
        if not command.request_id:
            update["request_id"] = new_request_id()
        if command.requested_by == "anonymous":
            update["requested_by"] = self.requested_by
        command = command.model_copy(update=update) if update else command
        tenant = tenant or self.tenant
        verb = VERB_OF[command.type]  # type: ignore[attr-defined]
        if not tracing.enabled():
            return await self._request(command, tenant, verb, timeout, attempts or self.attempts)
        # One span for the request and its retries; the planner's (and the job's) are its children.
        with tracer.span(f"muster {verb}", kind="client", tenant=tenant, verb=verb, request_id=command.request_id) as span:
            reply = await self._request(command, tenant, verb, timeout, attempts or self.attempts)
            tracing.set_attributes(span, answer=reply.type, job=getattr(reply, "job_id", None))
            if isinstance(reply, Rejected):
                tracing.set_error(span, reply.reason)
            return reply

    async def _request(self, command: Command, tenant: str, verb: str, timeout: float | None, attempts: int) -> Reply:
        last: BaseException | Rejected | None = None
        attempt, waited = 0, 0.0
        while attempt < attempts or (isinstance(last, nats.errors.NoRespondersError)
                                     and waited + _pause(attempt) <= NO_PLANNER_WAIT_S):
            if attempt and isinstance(last, nats.errors.NoRespondersError | Rejected):
                # back off: no planner is subscribed, or none holds the cluster's shard yet
                waited += _pause(attempt)
                await asyncio.sleep(_pause(attempt))
            attempt += 1
            try:
                reply = await self.send(tenant, command, timeout or self.timeout)
            except RETRYABLE as err:
                last = err
                continue
            if isinstance(reply, Rejected) and reply.retry and attempt < attempts:
                last = reply
                continue
            return reply
        what = "no planner is listening" if isinstance(last, nats.errors.NoRespondersError) else "no answer in time"
        raise NoAnswer(f"{verb} request {command.request_id} got no answer after {attempt} attempts ({what})")

    async def submit(self, command: Command, *, tenant: str | None = None) -> Accepted | DryRun | LeaseExtended:
        """`request`, with a rejection raised as RequestRejected."""
        reply = await self.request(command, tenant=tenant)
        if isinstance(reply, Rejected):
            raise RequestRejected(reply, VERB_OF[command.type])  # type: ignore[attr-defined]
        return reply

    async def run(self, command: Command, *, tenant: str | None = None, timeout: float = 600.0) -> Outcome:
        """Submit and wait for the job's end. Job-control commands (retry, resume...) wait for
        the end that follows the request, not an earlier one."""
        tenant = tenant or self.tenant
        since = 0
        job_id = getattr(command, "job_id", None)
        if job_id:
            since = await self.job_seq(job_id, tenant)
        reply = await self.submit(command, tenant=tenant)
        if not isinstance(reply, Accepted):
            raise MusterError("run() executes operations (jobs); send dry runs and lease extensions with request()")
        return Outcome(reply, await self.wait(reply.job_id, tenant=tenant, timeout=timeout, since_seq=since))

    # -- following a job ------------------------------------------------------------------------

    async def job_seq(self, job_id: str, tenant: str | None = None) -> int:
        """The log sequence of the job's latest event (0 if none): wait from there to see only
        what happens next."""
        return await EventStore(self.nc).last_seq(subjects.job_events(tenant or self.tenant, job_id))

    QUIET_S = 30.0
    """A follow that hears nothing for this long subscribes again from the last event it saw.
    nats-py does not always make again an ordered consumer lost with the server node that held
    it: the nemesis soak once waited its whole deadline for a job that had succeeded
    (docs/faults.md). Starting again from the next sequence repeats and skips nothing."""

    async def events(
        self, job_id: str, tenant: str | None = None, since_seq: int = 0, until: Iterable[str] = FINAL_JOB_EVENTS
    ) -> AsyncGenerator[Recorded, None]:
        """The job's events and task records (`subjects.job_filters`), from the first (or the
        first after `since_seq`), up to and including the first whose type is in `until`."""
        stop = frozenset(until)
        filters = subjects.job_filters(tenant or self.tenant, job_id)
        last = since_seq
        while True:
            queue: asyncio.Queue[Msg] = asyncio.Queue()
            config = ConsumerConfig(filter_subjects=filters, opt_start_seq=last + 1 if last else None)
            sub = await self.js.subscribe(filters[0], ordered_consumer=True, cb=queue.put, idle_heartbeat=2.0, config=config,
                                          deliver_policy=DeliverPolicy.BY_START_SEQUENCE if last else DeliverPolicy.ALL)
            try:
                while True:
                    try:
                        msg = await asyncio.wait_for(queue.get(), self.QUIET_S)
                    except TimeoutError:
                        break  # quiet: subscribe again from `last`
                    recorded = await inflate(self._bodies, recorded_from_msg(msg))
                    last = recorded.seq
                    yield recorded
                    if recorded.type in stop:
                        return
            finally:
                # (closed late, by a caller that stopped reading, after its connection began to close, too)
                await close_push(sub)

    async def wait(self, job_id: str, tenant: str | None = None, timeout: float = 600.0, since_seq: int = 0) -> Any:
        """The job's final event (JobSucceeded, JobFailed, JobRolledBack, JobNeedsAttention),
        the first after `since_seq`; TimeoutError past the deadline."""
        async with asyncio.timeout(timeout), contextlib.aclosing(self.events(job_id, tenant, since_seq)) as events:
            # closed here, not when garbage-collected after the connection has gone
            async for recorded in events:
                if recorded.type in FINAL_JOB_EVENTS:
                    return recorded.event
        raise MusterError("job events ended without a final event")

    # -- reading clusters from the log ----------------------------------------------------------

    async def clusters(self, tenant: str | None = None) -> list[ClusterInfo]:
        """Every cluster of the tenant, folded from `muster.evt.<tenant>.cluster.*`."""
        tenant = tenant or self.tenant
        by_subject: dict[str, list[Recorded]] = {}
        for r in await EventStore(self.nc).read(f"{subjects.EVT}.{subjects.token(tenant, 'tenant')}.cluster.*"):
            by_subject.setdefault(r.subject, []).append(r)
        out = [c for c in map(ClusterInfo.from_history, by_subject.values()) if c is not None]
        if any(needs_catalog(c.drift) for c in out):  # what a repair does about a failed service depends on it
            services = (await read_catalog(EventStore(self.nc), tenant)).services
            out = [c.with_catalog(services) if needs_catalog(c.drift) else c for c in out]
        return sorted(out, key=lambda c: (c.name, c.updated))

    async def cluster(self, ref: str, tenant: str | None = None, include_deleted: bool = True) -> ClusterInfo:
        """A cluster by id, or by name (the live one of that name). Raises MusterError."""
        clusters = await self.clusters(tenant)
        for c in clusters:
            if c.id == ref:
                return c
        named = [c for c in clusters if c.name == ref and c.status != "deleted"]
        if not named and include_deleted:
            named = [c for c in clusters if c.name == ref][-1:]
        if len(named) == 1:
            return named[0]
        if named:
            raise MusterError(f"{len(named)} clusters are named {ref!r} ({', '.join(c.id for c in named)}): give the id")
        raise MusterError(f"no cluster {ref!r} in tenant {tenant or self.tenant!r}")
