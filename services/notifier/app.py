"""The notifier's use cases: turn log events into notifications owed to subscribers, and deliver
them with retries, every step recorded (docs/governance.md).

An event reaches `on_job_event` / `on_lease_event` through a durable consumer; each subscription
that wants what it tells of gets a `NotificationQueued` (its id derived from the subscription
and the event's sequence: a redelivered event queues nothing new), and only then is the event
acknowledged. Deliveries run from timers, outside the consumer: a receiver that is down or slow
holds up nothing but its own retries (and never the planner, which does not know it exists).
Each attempt is a `NotificationAttempted`; a failed one arms a timer for the next (backoff,
`domain/notices.py`), until one succeeds or the notifier gives up; one to a destination the
operator's rule refuses (`muster/destinations.py`) is the last at once. On start, every notification
not final in the log is owed again, its timer re-armed.

Traces (docs/tracing.md): a notification of a traced job is queued under the job's span (its
run's, for a retried job; a lease warning under what moved the lease), so its `NotificationQueued`
carries that context in the log and every attempt, a restart's too, is a `notify <subscription>`
span in the job's trace (attempt, status code, the next attempt's time, the error).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import structlog

from contracts import subjects
from contracts.events import ClusterLeaseChanged
from contracts.governance import Subscription
from contracts.notifications import NotificationAttempted, NotificationQueued
from muster import tracing
from muster.catalog.store import catalog_filter
from muster.catalog.store import state_of as catalog_state
from muster.destinations import DestinationRefused
from muster.ports.clock import Clock
from muster.ports.eventlog import Append, EventLog, Recorded
from muster.readmodel.clusters import fold_cluster
from muster.readmodel.observed import needs_catalog

from .domain.notices import body, drift_text, due_at, kinds_of, next_attempt, notification_id, state_of, wants

log = structlog.get_logger("muster.notifier")
tracer = tracing.Tracer("muster.notifier")

Deliver = Callable[[str, Subscription, dict[str, Any], str], Awaitable[tuple[bool, int | None, str]]]
"""(tenant, subscription, body, notification id) -> (delivered, HTTP status, error); raises
`DestinationRefused` for a webhook the operator's rule does not let go where it points."""
Subscriptions = Callable[[str], list[Subscription]]
AuthorRefusal = Callable[[str, str], str | None]
"""(tenant, subscription) -> why its author (who last wrote it) may no longer have it sent, or
None: a subscription sends the tenant's events as long as its author may read them, as a
schedule runs only while its owner may (docs/governance.md)."""


UNRECORDED_AGAIN_S = 5.0
"""Wait before an attempt whose outcome the log did not take is made again."""


def _no_refusal(tenant: str, name: str) -> str | None:
    return None


@dataclass
class Owed:
    tenant: str
    subscription: str
    queued: NotificationQueued
    attempts: int = 0
    trace: str | None = None
    """The span its attempts go under (the job's, as its `NotificationQueued` was appended): None, untraced."""


def _key(tenant: str, subscription: str, nid: str) -> tuple[str, str, str]:
    return tenant, subscription, nid


class Notifier:
    def __init__(self, log_: EventLog, deliver: Deliver, clock: Clock, subscriptions: Subscriptions,
                 author_refusal: AuthorRefusal = _no_refusal) -> None:
        self.log, self.deliver, self.clock, self.subscriptions = log_, deliver, clock, subscriptions
        self.author_refusal = author_refusal
        self.owed: dict[tuple[str, str, str], Owed] = {}
        self.made: set[tuple[str, str, str]] = set()
        """Every notification queued (read back on start): a redelivered event, which makes the
        same ids, queues and sends nothing again, even once the first was delivered."""
        self.timers: dict[tuple[str, str, str], Any] = {}
        self.catching_up: set[tuple[str, str]] = set()
        """(tenant, subscription) whose backlog is being sent now, after a delivery went through."""

    async def resume(self) -> None:
        """Every notification the log says is still owed, its next attempt armed."""
        for r in await self.log.read(subjects.ALL_NOTIFICATION_EVENTS):
            tenant, subscription = r.subject.split(".")[2], r.subject.split(".")[4]
            e = r.event
            if isinstance(e, NotificationQueued):
                self.made.add(_key(tenant, subscription, e.id))
                self.owed.setdefault(_key(tenant, subscription, e.id), Owed(tenant, subscription, e, trace=r.trace))
            elif isinstance(e, NotificationAttempted) and (owed := self.owed.get(_key(tenant, subscription, e.id))):
                owed.attempts = e.attempt
                if e.final:
                    del self.owed[_key(tenant, subscription, e.id)]
                elif e.next_at is not None:
                    owed.queued = owed.queued.model_copy(update={"due_at": e.next_at})
        for key, owed in self.owed.items():
            self._arm(key, owed.queued.due_at)
        log.info("resumed", owed=len(self.owed))

    # -- events (routing.py) --------------------------------------------------------------------

    async def on_job_event(self, r: Recorded) -> None:
        tenant = r.subject.split(".")[2]
        subs = self.subscriptions(tenant)
        if not subs:
            return
        found = await self._job_facts(tenant, r)
        if found is None:
            return
        facts, trace = found
        for kind in kinds_of(r.type, facts["operation"], bool(facts.get("drift"))):
            for sub in subs:
                if wants(sub, kind, facts["cluster_id"], facts["cluster"]):
                    await self._queue(tenant, sub, kind, r, r.time, facts, trace)

    async def on_lease_event(self, r: Recorded) -> None:
        tenant = r.subject.split(".")[2]
        subs = self.subscriptions(tenant)
        if not subs:
            return
        cluster = fold_cluster(await self.log.read_through(r.subject, r.seq))
        await self._warn_lease(tenant, subs, r, cluster.name if cluster is not None else "")

    async def _warn_lease(self, tenant: str, subs: list[Subscription], r: Recorded, name: str) -> None:
        """`r` (a ClusterLeaseChanged) queued for each of `subs` that wants its warning, when due."""
        ends: datetime | None = r.event.expires_at
        facts = {"cluster_id": r.event.cluster_id, "cluster": name or r.event.cluster_id,
                 "expires_at": ends.isoformat() if ends else None}
        for sub in subs:
            when = due_at(sub, "lease_expiring", r.time, ends)
            if when is not None and wants(sub, "lease_expiring", r.event.cluster_id, name):
                await self._queue(tenant, sub, "lease_expiring", r, when, facts, r.trace)

    async def leases_before(self, tenant: str, sub: Subscription) -> None:
        """A subscription put that wants `lease_expiring`: the leases its tenant's clusters have
        now are warned of as if their events came now (the same ids: one queued already is not
        queued again). Before session 32 a lease set before the subscription was never warned
        of, unless it moved. Reads the tenant's cluster events, once per such put."""
        if "lease_expiring" not in sub.events:
            return
        by_cluster: dict[str, list[Recorded]] = {}
        for r in await self.log.read(subjects.tenant_cluster_events(tenant)):
            by_cluster.setdefault(r.subject, []).append(r)
        now = self.clock.now()
        for history in by_cluster.values():
            cluster = fold_cluster(history)
            lease = next((r for r in reversed(history) if isinstance(r.event, ClusterLeaseChanged)), None)
            if cluster is None or lease is None or cluster.status == "deleted" or lease.event.expires_at is None \
                    or lease.event.expires_at <= now:
                continue
            await self._warn_lease(tenant, [sub], lease, cluster.name or "")

    async def _job_facts(self, tenant: str, r: Recorded) -> tuple[dict[str, Any], str | None] | None:
        """What a notification of the job says, and the span it goes under: the job's run that
        ended (its first run's is the job's own span, a retry's derived from it)."""
        history = await self.log.read_through(r.subject, r.seq)  # (the job's subject: ALL_JOB_EVENTS)
        first = history[0].event if history else None
        if first is None or first.type != "JobRequested":
            return None
        cluster = fold_cluster(await self.log.read(subjects.cluster_events(tenant, first.cluster_id)))
        found = cluster.drift() if cluster is not None and first.operation == "check" else []
        if cluster is not None and needs_catalog(found):  # what a repair would do: the catalog of that moment says
            found = cluster.drift(catalog_state(await self.log.read(catalog_filter(tenant), up_to_seq=r.seq)).catalog.services)
        drift = [d.to_json() for d in found]
        e = r.event
        trace = tracing.run(getattr(first, "trace", None), first.job_id, sum(h.type == "JobRetried" for h in history))
        return {"job_id": first.job_id, "operation": first.operation, "cluster_id": first.cluster_id,
                "cluster": cluster.name if cluster is not None and cluster.name else first.cluster_id,
                "requester": first.requested_by, "state": state_of(r.type),
                "reason": getattr(e, "reason", None), "expires_at": getattr(e, "expires_at", None),
                "rules": getattr(e, "rules", None), "drift": drift or None, "count": len(drift) or None,
                **({"drift_text": drift_text(drift)} if drift else {})}, trace

    async def _queue(self, tenant: str, sub: Subscription, kind: str, cause: Recorded, when: datetime,
                     facts: dict[str, Any], trace: str | None = None) -> None:
        nid = notification_id(sub.name, cause.seq, kind)
        key = _key(tenant, sub.name, nid)
        if key in self.made:
            return
        shown = {**facts, "drift": facts.get("drift_text") or facts.get("drift"), "seq": cause.seq}
        shown.pop("drift_text", None)
        queued = NotificationQueued(id=nid, subscription=sub.name, kind=kind, cause_seq=cause.seq, due_at=when,  # type: ignore[arg-type]
                                    body=body(kind, tenant, shown))
        await self.log.append(subjects.notification_events(tenant, sub.name),
                              [Append(queued, msg_id=f"notify:{tenant}:{nid}", trace=trace)])
        self.made.add(key)
        self.owed[key] = Owed(tenant, sub.name, queued, trace=trace)
        now = self.clock.now()
        tracer.record("notification queued", tracing.child(trace), trace, now, now, tenant=tenant, subscription=sub.name,
                      kind=kind, notification=nid, due_at=when.isoformat())
        self._arm(key, when)

    async def queue_test(self, tenant: str, sub: Subscription, nid: str) -> NotificationAttempted:
        """`muster notify test`: a notification sent now, recorded like any other; its first attempt's outcome."""
        queued = NotificationQueued(id=nid, subscription=sub.name, kind="test", cause_seq=0, due_at=self.clock.now(),
                                    body=body("test", tenant, {"subscription": sub.name}))
        await self.log.append(subjects.notification_events(tenant, sub.name), [Append(queued, msg_id=f"notify:{tenant}:{nid}")])
        key = _key(tenant, sub.name, nid)
        self.owed[key] = Owed(tenant, sub.name, queued)
        return await self._attempt(key, sub)

    # -- deliveries -------------------------------------------------------------------------------

    def _arm(self, key: tuple[str, str, str], when: datetime) -> None:
        old = self.timers.pop(key, None)
        if old is not None:
            old.cancel()
        self.timers[key] = self.clock.call_at(when, lambda: self._attempt(key))

    async def _attempt(self, key: tuple[str, str, str], given: Subscription | None = None) -> NotificationAttempted:
        """`given`: the subscription as the caller read it (a test right after `notify add`).
        A span in the job's trace when it is traced (`Owed.trace`); the outcome, appended inside
        it, carries it in the log."""
        self.timers.pop(key, None)
        owed = self.owed[key]
        tenant, name, nid = key
        if owed.trace is None:
            return await self._attempted(key, owed, given, None)
        with tracer.span(f"notify {name}", owed.trace, kind="client", tenant=tenant, subscription=name,
                         notification=nid, attempt=owed.attempts + 1, **{"muster.kind": owed.queued.kind}) as span:
            return await self._attempted(key, owed, given, span)

    async def _attempted(self, key: tuple[str, str, str], owed: Owed, given: Subscription | None, span: Any) -> NotificationAttempted:
        tenant, name, nid = key
        sub = given or next((s for s in self.subscriptions(tenant) if s.name == name), None)
        attempt = owed.attempts + 1
        if sub is None:
            outcome = NotificationAttempted(id=nid, attempt=attempt, ok=False, error="the subscription was removed", final=True)
        elif not await self._still_true(tenant, owed.queued):
            outcome = NotificationAttempted(id=nid, attempt=attempt, ok=False, error="no longer true: the lease moved",
                                            final=True)
        elif (why := self.author_refusal(tenant, name)) is not None:  # disabled, or its read taken back, since
            outcome = NotificationAttempted(id=nid, attempt=attempt, ok=False, error=f"not sent: {why}"[:500], final=True)
        else:
            refused = False
            try:
                ok, status, error = await self.deliver(tenant, sub, owed.queued.body, nid)
            except DestinationRefused as err:  # the operator's rule, not the receiver: no retry would go through
                ok, status, error, refused = False, None, str(err), True
            except Exception as err:  # noqa: BLE001 - any failure of one delivery is that attempt's, recorded and retried
                ok, status, error = False, None, f"the delivery failed: {type(err).__name__}: {err}"
            # A test is one attempt: its outcome is `notify test`'s answer, not a retry minutes later.
            again = None if ok or refused or owed.queued.kind == "test" else next_attempt(attempt, self.clock.now())
            outcome = NotificationAttempted(id=nid, attempt=attempt, ok=ok, status=status, error=error[:500],
                                            final=ok or again is None, next_at=again)
        _traced(span, sub, outcome)
        try:
            await self.log.append(subjects.notification_events(tenant, name),
                                  [Append(outcome, msg_id=f"notify:{tenant}:{nid}:{attempt}")])
        except Exception as err:  # the log away (a partition, an election)
            if owed.queued.kind == "test":
                raise  # `notify test`'s answer says it
            # Tried again, as if it had failed: before session 32 its timer was spent and nothing
            # armed another, so it was never delivered (nor given up) until a restart. Delivery is at
            # least once: a receiver takes each `Muster-Delivery` id once.
            log.warning("notification attempt not recorded; trying again", tenant=tenant, subscription=name, id=nid,
                        error=f"{type(err).__name__}: {err}"[:200], again_in_s=UNRECORDED_AGAIN_S)
            self._arm(key, self.clock.now() + timedelta(seconds=UNRECORDED_AGAIN_S))
            return outcome.model_copy(update={"ok": False})  # (a catch-up stops there)
        owed.attempts = attempt
        if outcome.final:
            self.owed.pop(key, None)
        elif outcome.next_at is not None:
            self._arm(key, outcome.next_at)
        log.info("notification attempted", tenant=tenant, subscription=name, id=nid, attempt=attempt, ok=outcome.ok,
                 status=outcome.status, error=outcome.error[:200], final=outcome.final)
        if outcome.ok and (tenant, name) not in self.catching_up:
            await self._catch_up(tenant, name, sub)
        return outcome

    async def _catch_up(self, tenant: str, name: str, sub: Subscription | None) -> None:
        """The receiver answers again: what it missed is sent now, oldest first, rather than each
        at its own backoff (up to 15 minutes later, and in whatever order those fell). Only
        notifications that failed before; a first attempt still due (a lease warning) waits for
        its time. Stops at the first failure, which keeps its own backoff."""
        self.catching_up.add((tenant, name))
        try:
            while True:
                waiting = sorted((o.queued.cause_seq, key) for key, o in self.owed.items()
                                 if key[:2] == (tenant, name) and o.attempts > 0 and key in self.timers)
                if not waiting:
                    return
                key = waiting[0][1]
                self.timers.pop(key).cancel()
                if not (await self._attempt(key, sub)).ok:
                    return
        finally:
            self.catching_up.discard((tenant, name))

    async def _still_true(self, tenant: str, queued: NotificationQueued) -> bool:
        """A lease warning is dropped when the lease moved since (extended, or the cluster deleted)."""
        if queued.kind != "lease_expiring":
            return True
        cluster = fold_cluster(await self.log.read(subjects.cluster_events(tenant, str(queued.body.get("cluster_id")))))
        ends = cluster.expires_at.isoformat() if cluster is not None and cluster.expires_at else None
        return cluster is not None and cluster.status != "deleted" and ends == queued.body.get("expires_at")

    def close(self) -> None:
        for handle in self.timers.values():
            handle.cancel()
        self.timers.clear()


def _traced(span: Any, sub: Subscription | None, outcome: NotificationAttempted) -> None:
    """An attempt's outcome on its span (None: untraced): never the URL (it may be a secret's
    reference's target) nor the body; the error as the log has it."""
    if span is None:
        return
    tracing.set_attributes(span, target="webhook" if sub is not None and sub.webhook else "subject" if sub is not None else None,
                           ok=outcome.ok, final=outcome.final, next_at=outcome.next_at.isoformat() if outcome.next_at else None,
                           **({"http.response.status_code": outcome.status} if outcome.status is not None else {}))
    if not outcome.ok:
        tracing.set_error(span, outcome.error or "not delivered")
