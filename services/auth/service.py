"""The auth service: answers nats-server's auth callout, serves the identity requests
(`muster.auth.<principal>.<verb>`), and closes the connections of revoked tokens and disabled
principals (docs/security.md).

Three connections, as the auth users the server lets in without a callout: `AUTH` (the callout
requests, which carry tokens: nobody else is in that account), `MUSTER` (identity events and
requests) and `SYS` (CONNZ and KICK). State is the identity events' fold (IdentityView).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import NoStreamResponseError, ServiceUnavailableError
from pydantic import ValidationError

from contracts import subjects
from contracts.errors import problem_text
from contracts.identity import (
    AuthReply,
    AuthRequest,
    IdentityEvent,
    PermissionGranted,
    PermissionRevoked,
    PrincipalDisabled,
    TokenRevoked,
)
from contracts.limits import not_strict_json
from muster.bus import replicas
from muster.bus.answers import answer_on_inbox
from muster.bus.bodymove import move_old_bodies
from muster.bus.connect import connect, on_reconnect
from muster.bus.eventstore import EventStore
from muster.bus.streams import ensure_streams
from muster.bus.wire import Refused, flush
from muster.ports.eventlog import Append, ConcurrencyError, EventLog

from . import taskqueue
from .backends import IdentityBackend, identity_backends
from .bootstrap import Bootstrap, ensure_bootstrap
from .callout import answer
from .domain.admin import Admin
from .keys import AUTH_USER, LOG_USER, SYS_USER, AuthKeys
from .natsjwt import Signer
from .view import IdentityView

log = structlog.get_logger("muster.auth")

CALLOUT_SUBJECT = "$SYS.REQ.USER.AUTH"
GATHER_S = 0.5
BOOTSTRAP_RETRIES = 7
"""On a cluster that has just started the stream may have no leader yet ("no response from
stream": nothing was stored), so the first writes are asked again (0.1 s doubling: ~13 s)."""
"""How long CONNZ answers are gathered from the servers of a cluster (they answer at once)."""


@dataclass
class AuthService:
    url: str
    keys: AuthKeys
    idp: str | None = None
    """an identity provider's JSON config (default: $MUSTER_IDP)"""
    bootstrap: Bootstrap | None = None
    replicas: int = 1
    view: IdentityView | None = field(default=None, init=False)
    kicked: int = field(default=0, init=False)
    _conns: list[Client] = field(default_factory=list, init=False)
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set, init=False)
    lost: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    """set when one of the connections is closed for good (nats-py gives one up on some of the
    server's errors): the service exits, and its supervisor starts it again"""
    _stopping: bool = field(default=False, init=False)

    async def _bootstrap(self) -> None:
        for attempt in range(BOOTSTRAP_RETRIES + 1):
            try:
                await ensure_bootstrap(self, self.bootstrap)
                return
            except (NoStreamResponseError, ServiceUnavailableError, Refused) as err:
                # (the one wire's 503: no stream took the subject on this server yet, its interest
                # still on its way through the routes of a cluster that just made it; a fresh
                # clone's fault run met it)
                if attempt == BOOTSTRAP_RETRIES or (isinstance(err, Refused) and err.status != "503"):
                    raise
                log.info("the log has no leader yet; bootstrapping again", error=str(err) or type(err).__name__)
                await asyncio.sleep(0.1 * 2**attempt)  # a bounded retry of one write, not a poll

    async def _connect(self, user: str, name: str) -> Client:
        async def on_closed() -> None:
            if not self._stopping:
                log.error("a connection to NATS was closed for good; exiting to be started again",
                          connection=name, error=str(nc.last_error) if nc.last_error else "")
                self.lost.set()

        nc = await connect(self.url, name=name, user=user, password=self.keys.bus_secret, token=None,
                           inbox_prefix="_INBOX.muster-auth", closed_cb=on_closed)
        self._conns.append(nc)
        return nc

    async def start(self) -> AuthService:
        self.signer = Signer(self.keys.issuer_seed)
        self.nc = await self._connect(LOG_USER, "muster-auth")
        await self._streams()
        self._spawn(self._move_bodies())
        # Buckets made with fewer replicas than the deployment's (an older version), given them
        # now and at each one's creation (muster/bus/replicas.py)
        await self.nc.subscribe(replicas.CREATED, cb=self._on_bucket_created)
        self._spawn(replicas.replicate_buckets(self.nc.jetstream(), self.replicas))
        # TASKS as declared, whoever declares it again after a restart lost it (services/auth/taskqueue.py)
        await self.nc.subscribe(taskqueue.CREATED, cb=self._on_tasks_created)
        on_reconnect(self.nc, self._restore_tasks)
        self.store: EventLog = EventStore(self.nc)
        self.view = await self._identity_view()
        self.backends: Sequence[IdentityBackend] = identity_backends(self.view.state, self.idp)
        await self._bootstrap()
        self.sys_nc = await self._connect(SYS_USER, "muster-auth-sys")
        # A revocation made just before a crash (appended, not yet kicked) is enforced now.
        self._spawn(self.kick(self._refused_now))
        await self.nc.subscribe(subjects.ALL_AUTH_REQUESTS, queue="auth", cb=self._on_request)
        self.callout_nc = await self._connect(AUTH_USER, "muster-auth-callout")
        await self.callout_nc.subscribe(CALLOUT_SUBJECT, queue="auth", cb=self._on_callout)
        for nc in self._conns:
            await flush(nc)  # started means subscribed (the callout first of all)
        return self

    async def _identity_view(self, tries: int = 4) -> IdentityView:
        """A cluster just formed (its streams declared a moment ago) may take longer than the
        JetStream API's 5 s to make the view's consumer: a bounded retry of that request (0.25 s,
        doubling), never a poll; it made `muster up` fail to start (a fault scenario, session 25)."""
        for attempt in range(tries):
            try:
                return await IdentityView(self.nc, on_event=self._on_identity_event).start()
            except NatsTimeoutError:
                if attempt == tries - 1:
                    raise
                log.info("the log did not make the identity view's consumer in time; asking again", attempt=attempt + 1)
                await asyncio.sleep(0.25 * 2**attempt)
        raise AssertionError("unreachable")

    async def _streams(self, tries: int = 8) -> None:
        """A cluster that has just elected its meta leader may refuse a stream for a moment:
        a bounded retry of the request (0.25 s, doubling), never a poll."""
        for attempt in range(tries):
            try:
                await ensure_streams(self.nc.jetstream(), replicas=self.replicas)
                return
            except Exception as err:
                if attempt == tries - 1:
                    raise
                log.warning("streams not ready yet", error=str(err) or type(err).__name__)
                await asyncio.sleep(0.25 * 2**attempt)

    async def _move_bodies(self) -> None:
        """Bodies offloaded before decision 0057, copied where the scoped services read them."""
        try:
            await move_old_bodies(self.nc)
        except Exception as err:  # noqa: BLE001 - told; the next start moves them (nothing is marked done)
            log.error("bodies stored before 0057 could not be moved", error=str(err) or type(err).__name__)

    async def _on_bucket_created(self, msg: Msg) -> None:
        stream = msg.subject.rsplit(".", 1)[-1]
        if stream in {replicas.kv_stream(b) for b in replicas.BUCKETS}:
            try:
                await replicas.ensure_replicas(self.nc.jetstream(), stream, self.replicas, may_update=True)
            except Exception as err:  # noqa: BLE001 - told; the next start looks again
                log.warning("a bucket's replicas could not be checked", stream=stream, error=str(err) or type(err).__name__)

    async def _on_tasks_created(self, msg: Msg) -> None:
        await self._restore_tasks()  # (one at a time: the subscription's callbacks are)

    async def _restore_tasks(self) -> None:
        try:
            await taskqueue.restore_tasks(self.nc.jetstream(), self.replicas)
        except Exception as err:  # noqa: BLE001 - told; the next creation or reconnect looks again
            log.error("TASKS could not be checked", error=str(err) or type(err).__name__)

    async def stop(self) -> None:
        self._stopping = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.view is not None:
            await self.view.stop()
        for nc in reversed(self._conns):
            if not nc.is_closed:
                await nc.drain()
        self._conns.clear()

    # -- the callout ----------------------------------------------------------------------------

    async def _on_callout(self, msg: Msg) -> None:
        assert self.view is not None
        try:
            outcome = answer(msg.data, self.backends, self.view.state, self.signer, time.time())
        except Exception:
            log.exception("auth callout failed")
            return
        if outcome.response is None:
            log.warning("auth request ignored", reason=outcome.reason)
            return
        if outcome.authenticated is not None:
            a = outcome.authenticated
            log.info("connection accepted", principal=a.principal.id, token=a.token_id, server=outcome.server_id[:8], cid=outcome.client_id)
        else:
            log.info("connection refused", reason=outcome.reason, server=outcome.server_id[:8], cid=outcome.client_id)
        await msg.respond(outcome.response.encode())

    # -- identity requests --------------------------------------------------------------------

    async def _on_request(self, msg: Msg) -> None:
        try:
            reply = await self._handle(msg.subject, msg.data)
        except Exception:
            log.exception("auth request failed", subject=msg.subject)
            reply = AuthReply(ok=False, reason="internal error in the auth service; see its log")
        await answer_on_inbox(msg, reply.model_dump_json().encode())

    async def _handle(self, subject: str, data: bytes) -> AuthReply:
        assert self.view is not None
        parts = subject.split(".")
        if len(parts) != 4:
            return AuthReply(ok=False, reason=f"{subject!r} is not muster.auth.<principal>.<verb>")
        requester, verb = parts[2], parts[3]
        if (not_json := not_strict_json(data or b"{}")) is not None:
            return AuthReply(ok=False, reason=f"bad request body: it {not_json}")
        try:
            request = AuthRequest.model_validate_json(data or b"{}")
        except ValidationError as err:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {problem_text(e)}" for e in err.errors()[:5])
            return AuthReply(ok=False, reason=f"bad request body: {problems}")
        result = Admin(self.view.state, os.urandom, time.time()).handle(requester, verb, request)
        last = 0
        for subj, event, expect in result.appends:
            try:
                last = max(last, *(await self.append(subj, event, expect)))
            except ConcurrencyError:
                return AuthReply(ok=False, reason=f"{subj.rsplit('.', 1)[1]} was changed at the same time by another request; try again")
        if last:
            await self.view.wait_for(last)
        if result.appends:
            log.info("identity change", requester=requester, verb=verb, events=[type(e).__name__ for _, e, _ in result.appends])
        return result.reply

    async def append(self, subject: str, event: IdentityEvent, expect: int | None) -> list[int]:
        key = hashlib.sha256(f"{subject}:{event.model_dump_json()}".encode()).hexdigest()[:32]
        return await self.store.append(subject, [Append(event, msg_id=f"auth-{key}")], expect_last_seq=expect)  # type: ignore[arg-type]

    # -- revocation ---------------------------------------------------------------------------

    def _on_identity_event(self, event: IdentityEvent) -> None:
        if isinstance(event, TokenRevoked):
            name = f"{event.principal}:{event.token_id}"
            self._spawn(self.kick(lambda user: user == name, user=name))
        elif isinstance(event, PrincipalDisabled):
            prefix = f"{event.principal}:"
            self._spawn(self.kick(lambda user: user.startswith(prefix)))
        elif isinstance(event, PermissionGranted | PermissionRevoked) and event.scope.kind == "queue":
            # A provisioner's bus permissions name its queues: they are made when it connects,
            # so it reconnects to get the new ones (and asks again which queues it serves).
            prefix = f"{event.principal}:"
            self._spawn(self.kick(lambda user: user.startswith(prefix)))

    def _refused_now(self, user: str) -> bool:
        """Is this connection's user (`<principal>:<token id>`) one the log refuses by now?"""
        assert self.view is not None
        state = self.view.state
        principal, _, token_id = user.partition(":")
        record = state.tokens.get(token_id)
        known = state.principals.get(principal)
        return bool((record is not None and record.revoked) or token_id in state.revoked_external
                    or (known is not None and known.disabled))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def kick(self, match: Any, user: str | None = None) -> int:
        """Close every connection whose user name matches, on every server; returns how many."""
        if not getattr(self, "sys_nc", None):
            return 0  # still starting: nothing could have connected with what was revoked before
        found: list[tuple[str, int]] = []
        inbox = self.sys_nc.new_inbox()

        async def on_reply(msg: Msg) -> None:
            try:
                body = json.loads(msg.data)
                server = body["server"]["id"]
                found.extend((server, c["cid"]) for c in body["data"].get("connections", [])
                             if match(c.get("authorized_user", "")))
            except (ValueError, KeyError, TypeError) as err:
                log.warning("unreadable CONNZ answer", error=str(err))

        sub = await self.sys_nc.subscribe(inbox, cb=on_reply)
        query: dict[str, Any] = {"auth": True, "limit": 100000}
        if user:
            query["user"] = user
        try:
            await self.sys_nc.publish("$SYS.REQ.SERVER.PING.CONNZ", json.dumps(query).encode(), reply=inbox)
            await asyncio.sleep(GATHER_S)  # a scatter-gather: every server answers once, at once
        finally:
            await sub.unsubscribe()
        # Counted before they are sent: the server closes a connection before it answers the
        # kick, so whoever watches the connection may look at the count before the answer.
        self.kicked += len(found)
        for server, cid in found:
            try:
                await self.sys_nc.request(f"$SYS.REQ.SERVER.{server}.KICK", json.dumps({"cid": cid}).encode(), timeout=2)
            except Exception as err:  # noqa: BLE001 - the connection may be gone already
                log.warning("kick failed", server=server[:8], cid=cid, error=str(err) or type(err).__name__)
        if found:
            log.info("revoked connections closed", count=len(found))
        return len(found)
