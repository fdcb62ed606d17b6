"""Planners share the clusters: each acts only for the clusters of the shards it holds a lease
on (`muster/bus/shards.py`), and a request reaches the owner of its cluster wherever it runs.

- **Ownership.** `ShardOwnership` is the planner's `Ownership` port: requests for other
  clusters are not handled here, their events are skipped, their job queries not answered.
- **Gaining a shard** (at start, or taking over a dead planner's): its clusters and their open
  jobs are rebuilt from the log (`Planner.resume`: outcomes they missed taken in, timers
  re-armed, queued attempts published again under the same message ids, so none is queued
  twice), then the planner listens on the shard's own request subject.
- **Losing a shard** (a graceful stop, a rebalance, a lapsed lease): it stops listening, drops
  the clusters, their jobs and timers, and only then is the lease released.
- **Requests.** Every planner takes requests from the queue group on `muster.ops.<t>.<principal>.<verb>`.
  The cluster a request is for decides its shard (a create: the cluster id derived from the
  request's idempotency key, which is given one here if it has none; a job command: the
  cluster its `JobRequested` names). A planner holding the shard answers it; any other
  forwards it to `muster.shard.<n>.ops.<t>.<principal>.<verb>`, which only the holder listens to, and
  relays the answer. While a shard is between owners (a takeover takes up to the lease's
  TTL), forwarding is retried for up to `wait_s`, then the request is refused with a reason
  that says to send it again, marked `retry` (with the same request id nothing is done twice;
  `MusterClient.request` sends it again by itself).
- **Answered in time.** `wait_s` is at most `FORWARD_WAIT_S`, below the client's per-try
  timeout: a requester hears "send again" before it gives up on a try (docs/faults.md). And a
  request waiting for a shard holds up no other: each is answered in a task of its own
  (`replies.Responders`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from typing import Any

import structlog
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js.errors import NotFoundError

from contracts import subjects
from contracts.commands import JOB_VERBS, VERB_OF, Rejected
from contracts.events import PlanSaved
from contracts.limits import strict_json
from muster import tracing
from muster.bus.leasethread import ThreadedLeases
from muster.bus.shards import shard_of
from muster.bus.wire import flush
from muster.routing import NotYet

from .app import Planner
from .domain import planning
from .messages import COMMAND_OF_VERB, RequestContext
from .replies import Responders
from .routing import SHARD_REPLY

log = structlog.get_logger("muster.planner")

FORWARD_WAIT_S = 6.0
"""The longest a request waits for its shard's owner (`MusterClient`'s per-try timeout is 10 s)."""


def shard_subject(shard: int, tenant: str = "*", principal: str = "*", verb: str = "*") -> str:
    return subjects.shard_operation(shard, tenant, principal, verb)


class ShardOwnership:
    """The planner's `Ownership` with shards: it acts for the clusters of the shards it holds a
    lease on. Also its `Shards`, which the shared concurrency budgets are divided by."""

    def __init__(self, leases: ThreadedLeases) -> None:
        self.leases = leases

    def owns(self, tenant: str, cluster_id: str) -> bool:
        return self.leases.owns_cluster(cluster_id)

    def shard_of(self, cluster_id: str) -> int:
        return shard_of(cluster_id, self.leases.shards)

    def holds(self, shard: int) -> bool:
        return self.leases.owns(shard)

    async def settle(self, tenant: str, cluster_id: str) -> None:
        """An event for a cluster whose lease is being renewed late (held, past its validity:
        after a bus outage, or a loop busy for seconds) is neither taken in nor skipped
        (skipped, it would be acked and lost: no rebuild follows a late renewal); it comes
        again a little later, when the lease is renewed or lost."""
        shard = shard_of(cluster_id, self.leases.shards)
        if not self.leases.owns(shard) and shard in self.leases.held:
            raise NotYet(f"the lease on shard {shard} is being renewed late")


class Sharding:
    def __init__(self, nc: Client, planner: Planner, leases: ThreadedLeases, wait_s: float | None = None) -> None:
        self.nc, self.planner, self.leases = nc, planner, leases
        self.wait_s = wait_s if wait_s is not None else min(2 * leases.ttl_s, FORWARD_WAIT_S)
        # Forwarded requests are answered each in a task of its own, with slots of their own: one
        # at a time, a queue formed behind a slow one, every answer came after the forwarder's
        # deadline and each resend joined the queue (a request unanswered for 100 s in the
        # partition soak, docs/faults.md); and requests waiting for an owner elsewhere never
        # take every slot an owner's answers need.
        self._forwarded = Responders()
        self._on_forwarded = self._forwarded.responder(getattr(self, SHARD_REPLY.answer), concurrent=True)
        self._subs: dict[int, Any] = {}
        self._ready: dict[int, asyncio.Event] = {}
        """Shards whose clusters are rebuilt: requests for them are answered from then on."""
        leases.on_gained, leases.on_lost = self.gained, self.lost

    def _in(self, shards: set[int]) -> Any:
        n = self.leases.shards
        return lambda cluster_id: shard_of(cluster_id, n) in shards

    # -- shards coming and going -----------------------------------------------------------------

    async def gained(self, shards: set[int]) -> None:
        for shard in shards:
            self._ready[shard] = asyncio.Event()
        await self.planner.resume(self._in(shards))
        await self.planner.catch_up_pools(self._in(shards))  # grants that came while nobody acted for them
        for shard in shards:
            stale = self._subs.pop(shard, None)
            if stale is not None:  # gained again without the loss in between: one subscription only
                log.warning("shard gained while still subscribed", shard=shard)
                await _unsubscribe(stale)
            self._subs[shard] = await self.nc.subscribe(SHARD_REPLY.subject.format(shard=shard), cb=self._on_forwarded)
            self._ready[shard].set()
        await flush(self.nc)

    async def lost(self, shards: set[int]) -> None:
        for shard in shards:
            self._ready.pop(shard, None)
            sub = self._subs.pop(shard, None)
            if sub is not None:
                await _unsubscribe(sub)
        await self.planner.forget(self._in(shards))

    async def close(self) -> None:
        """Stop answering forwarded requests: those in hand are dropped (their forwarders ask again)."""
        await self._forwarded.close()

    # -- requests ----------------------------------------------------------------------------------

    async def forwarded(self, subject: str, data: bytes) -> bytes | None:
        """`routing.SHARD_REPLY`: a request another planner sent on to the holder of its
        cluster's shard (`muster.shard.<n>.ops.<tenant>.<principal>.<verb>`; only planners may
        send on it)."""
        _, _, shard, _, tenant, principal, verb = (subject.split(".") + [""] * 7)[:7]
        await self.leases.settled(int(shard))  # renewed late (a slow loop or bus): decided in a moment
        if not self.leases.owns(int(shard)):
            reply: Any = Rejected(reason=f"shard {shard} moved to another planner; send the request again", retry=True)
        else:
            reply = await self.planner.answer(RequestContext(tenant=tenant, verb=verb, body=data, principal=principal))
        return bytes(reply.model_dump_json().encode())

    async def operation(self, tenant: str, principal: str, verb: str, data: bytes) -> bytes:
        """An operation request (`muster.ops.<tenant>.<principal>.<verb>`, the queue group),
        answered here or at the owner of its cluster's shard. With auth on the server lets only
        <principal> send on that subject, so it is the request's `by`, and it travels with the
        request to the owner."""
        try:
            data, cluster_id = await self._cluster_of(tenant, verb, data)
        except LookupError as err:
            return Rejected(reason=str(err)).model_dump_json().encode()
        except Exception as err:  # noqa: BLE001 - the log unreachable for a moment (a leader election)
            reason = f"could not find the job's cluster just now ({str(err) or type(err).__name__}); send the request again"
            return Rejected(reason=reason, retry=True).model_dump_json().encode()
        if cluster_id is None or not verb:  # not for a cluster (bad input): answered here
            return await self._here(tenant, principal, verb, data)
        return await self._forward(shard_of(cluster_id, self.leases.shards), tenant, principal, verb, data)

    async def _here(self, tenant: str, principal: str, verb: str, data: bytes) -> bytes:
        reply = await self.planner.answer(RequestContext(tenant=tenant, verb=verb, body=data, principal=principal))
        return reply.model_dump_json().encode()

    async def _forward(self, shard: int, tenant: str, principal: str, verb: str, data: bytes) -> bytes:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        while True:
            if self.leases.owns(shard):  # ours (once its clusters are rebuilt)
                ready = self._ready.get(shard)
                if ready is not None:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(ready.wait(), max(0.0, deadline - loop.time()))
                if ready is not None and ready.is_set() and self.leases.owns(shard):
                    return await self._here(tenant, principal, verb, data)
            seen = self.leases.revision(shard)
            try:
                left = deadline - loop.time()
                if left <= 0:
                    raise NatsTimeout
                answer = await self.nc.request(shard_subject(shard, tenant, principal, verb), data, timeout=left,
                                               headers=tracing.headers())
            except (NoRespondersError, NatsTimeout):
                # Between owners (the holder died, or is handing over), or the owner is slow:
                # wait for the shard's lease to change hands, then ask again; at the deadline,
                # answer "send again" (before the client's own try times out).
                if not await self.leases.changed(shard, seen, deadline - loop.time()):
                    reason = (f"no planner holds shard {shard} right now (a takeover takes up to {self.leases.ttl_s:g} s); "
                              "send the request again")
                    return Rejected(reason=reason, retry=True).model_dump_json().encode()
                continue
            return bytes(answer.data)

    async def _cluster_of(self, tenant: str, verb: str, data: bytes) -> tuple[bytes, str | None]:
        """The request (a create gets an idempotency key if it has none, so that its cluster
        id is decided here) and the cluster it is for; None when the body says nothing usable
        (the planner's own validation answers those)."""
        try:
            body = strict_json(data.decode("utf-8"))  # (bounded: a deep body is the planner's to refuse, not a RecursionError here)
            subjects.token(tenant, "tenant")
        except (ValueError, UnicodeDecodeError, subjects.SubjectError):
            return data, None
        if not isinstance(body, dict):
            return data, None
        if COMMAND_OF_VERB.get(verb) == "CreateCluster":
            if body.get("request_id") is None:  # not `not ...`: a wrong key ([], 0, "") is validation's to name
                body["request_id"] = uuid.uuid4().hex
                data = json.dumps(body).encode()
            try:
                return data, planning.created_ids(tenant, str(body["request_id"]))[1]
            except (TypeError, ValueError):
                return data, None
        if verb in JOB_VERBS:
            job_id = body.get("job_id")
            return data, (await self._job_cluster(tenant, job_id)) if isinstance(job_id, str) else None
        if verb == VERB_OF["ApplyPlan"]:
            plan_id = body.get("plan_id")
            return data, (await self._plan_cluster(tenant, plan_id)) if isinstance(plan_id, str) else None
        cluster_id = body.get("cluster_id")
        return data, cluster_id if isinstance(cluster_id, str) else None

    async def _job_cluster(self, tenant: str, job_id: str) -> str | None:
        """The cluster a job is for, from its first event (the leader has every write)."""
        try:
            subject = subjects.job_events(tenant, job_id)
            msg = await self.nc.jetstream().get_msg(subjects.EVENTS_STREAM, seq=1, subject=subject, next=True)
            return str(json.loads(msg.data or b"{}")["cluster_id"])
        except (subjects.SubjectError, NotFoundError, KeyError, ValueError):
            return None  # unknown: the planner answers "unknown job"


    async def _plan_cluster(self, tenant: str, plan_id: str) -> str | None:
        """The cluster a saved plan is for (a create's: the one it makes), from the plan."""
        try:
            found = await self.planner.log.read(subjects.plan_events(tenant, plan_id))
        except subjects.SubjectError:
            return None  # the planner names what is wrong with the id
        saved = found[0].event if found else None
        return saved.cluster_id if isinstance(saved, PlanSaved) else None  # none: "unknown plan"


async def _unsubscribe(sub: Any) -> None:
    try:
        await sub.unsubscribe()
    except Exception as err:  # noqa: BLE001 - gone with the connection
        log.warning("unsubscribe failed", subject=sub.subject, error=str(err) or type(err).__name__)
