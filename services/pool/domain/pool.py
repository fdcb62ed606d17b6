"""The Pool aggregate: a pool's hosts, the requests for them, and every decision about both.

One aggregate per pool, because its decisions must see each other: a grant takes hosts that a
removal, a reset or another grant also looks at, and the waiting queue is ordered as a whole.
Its subject has one writer at a time (expected-sequence fencing), so a host is never handed
out twice however many pool services, planners and provisioners run.

Pure: no IO, no clock (an expiry is decided with the time it is given). Decision methods
check, then record events; a bad administrator command raises `PoolError` and records
nothing. A requester's request is already a fact in the log when the pool sees it, so a bad one
is answered with a recorded `RequestRefused`. Facts seen twice change nothing.

Longer than most modules: the decisions and the events they record are one aggregate, and
reading them side by side is the point.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any
from uuid import NAMESPACE_URL, UUID, uuid5

from eventsourcing.domain import Aggregate, event

from contracts.pools import (
    MAX_HOSTS_PER_EVENT,
    AmbiguityDetected,
    AmbiguityResolved,
    Assignment,
    CallbackDelivered,
    Holder,
    HostFailed,
    HostRemoved,
    HostReset,
    HostsAdded,
    HostsConfirmed,
    HostsGranted,
    HostSpec,
    HostsReleased,
    HostsReleaseStarted,
    PoolConfigured,
    PoolNodesReported,
    PoolRequest,
    PoolTerms,
    RequestAccepted,
    RequestCancelled,
    RequestClosed,
    RequestExpired,
    RequestRefused,
)
from contracts.pools import (
    PoolCreated as PoolCreated,  # re-exported: a new pool starts with it
)
from muster.times import shown_time

from .hosts import Host, HostBook
from .matching import RequirementError, fit, parse_requirement, sig_key
from .policy import policy_named, priority_of
from .queue import OpenRequest, RequestBook


class PoolError(ValueError):
    """A command the pool refuses; the message says why, for a person."""


def pool_uuid(name: str) -> UUID:
    return uuid5(NAMESPACE_URL, f"muster:pool:{name}")


class Pool(Aggregate):
    _applied_ahead = False
    """True while an event whose changes were applied as it was decided is being recorded."""

    @staticmethod
    def create_id(payload: PoolCreated) -> UUID:
        return pool_uuid(payload.pool)

    @event("PoolCreated")
    def __init__(self, payload: PoolCreated) -> None:
        self.name = payload.pool
        self.terms = PoolTerms()
        self.book = HostBook()
        self.requests = RequestBook()
        self.callbacks_due: dict[tuple[str, str], dict[str, Any]] = {}
        """(request id, 'grant' | 'end') -> {target: Callback, body}, until a delivery is recorded."""

    # ================================================================== administrators

    def configure(self, terms: PoolTerms, by: str) -> None:
        try:
            policy_named(terms.policy)
        except ValueError as err:
            raise PoolError(str(err)) from None
        self._configured(PoolConfigured(terms=terms, by=by))
        self._end_over_terms(by)
        self.serve()

    def _end_over_terms(self, by: str) -> None:
        """New terms: a waiting request they refuse (over the per-job limit, or over its
        tenant's quotas, counting what the tenant holds and the requests ahead of it in line)
        ends now, in the words a new one would be refused in. Left waiting, it was granted as
        the old terms allowed: a quota lowered to 1 host, a request for 3 got 3."""
        nodes: dict[str, int] = {}
        clusters: dict[str, set[str]] = {}
        for r in self.requests.in_order():
            req, size = r.request, r.size
            quota = self.terms.tenants.get(req.tenant)
            held = nodes.setdefault(req.tenant, sum(self.book.held_by_tenant.get(req.tenant, {}).values()))
            using = clusters.setdefault(req.tenant, set(self.book.held_by_tenant.get(req.tenant, {})))
            why = ""
            if self.terms.job_limit is not None and size > self.terms.job_limit:
                why = f"the request needs {hosts(size)}; pool {self.name} lends at most {self.terms.job_limit} to one job"
            elif quota is not None and quota.max_nodes is not None and held + size > quota.max_nodes:
                why = (f"tenant {req.tenant} may hold {quota.max_nodes} hosts of pool {self.name}: it holds and waits "
                       f"ahead of this request for {held}, so {size} more would exceed its quota")
            elif quota is not None and quota.max_clusters is not None and req.cluster_id not in using \
                    and len(using) + 1 > quota.max_clusters:
                n = quota.max_clusters
                why = (f"tenant {req.tenant} may use pool {self.name} for {n} cluster{'' if n == 1 else 's'} and "
                       f"already uses it for {len(using)}")
            if why:
                self._cancelled(RequestCancelled(request_id=req.request_id, by=by,
                                                 reason=f"{why} (the pool's terms changed while it waited)"))
                continue
            nodes[req.tenant] += size
            using.add(req.cluster_id)

    def add_hosts(self, specs: list[HostSpec], by: str) -> list[str]:
        """Register static hosts; returns the ids frozen as ambiguous. Refused as a whole if a
        host is listed twice or is already in the pool with the same facts."""
        twice = sorted(i for i, n in Counter(s.id for s in specs).items() if n > 1)
        if twice:
            raise PoolError(f"listed twice in one add: {', '.join(twice)}")
        same = [s.id for s in specs if s.id in self.book and self.book.hosts[s.id].spec.facts() == s.facts()]
        if same:
            raise PoolError(f"already in pool {self.name}: {', '.join(same)} (remove a host first to change it)")
        new = [s for s in specs if s.id not in self.book]
        for i in range(0, len(new), MAX_HOSTS_PER_EVENT):
            self._added(HostsAdded(hosts=new[i : i + MAX_HOSTS_PER_EVENT], by=by))
        frozen = self._mark_conflicts(specs, new, by)
        self.serve()
        return frozen

    def _mark_conflicts(self, specs: list[HostSpec], new: list[HostSpec], by: str) -> list[str]:
        frozen = []
        new_ids = {s.id for s in new}
        for s in specs:
            if s.id not in new_ids:  # the same id with other facts
                old = self.book.hosts[s.id].spec
                self._ambiguous(AmbiguityDetected(
                    host_id=s.id, claim=s, by=by,
                    reason=f"registered again as {s.address}:{s.port} with {_keys(s)}; "
                           f"the pool has {old.address}:{old.port} with {_keys(old)}",
                ))
                frozen.append(s.id)
                continue
            others = sorted(self.book.at(s.address, s.port) - {s.id} - self.book.hosts[s.id].others)
            if others:
                self._ambiguous(AmbiguityDetected(
                    host_id=s.id, others=others, by=by,
                    reason=f"address {s.address}:{s.port} is also host {', '.join(others)}",
                ))
                frozen += [s.id, *others]
        return sorted(set(frozen))

    def remove_host(self, host_id: str, by: str, reason: str = "") -> None:
        host = self._host(host_id)
        if host.holder is not None:
            raise PoolError(f"host {host_id} is {host.state} for {_holder(host)}; remove it once it is released")
        self._removed(HostRemoved(host_id=host_id, reason=reason, by=by))
        self._end_unservable(by, f"host {host_id} was removed")
        self.serve()

    def reset(self, host_id: str, by: str) -> None:
        host = self._host(host_id)
        if host.state != "error":
            raise PoolError(f"host {host_id} is {host.state}; only a host in error can be reset")
        if host.holder is not None:
            raise PoolError(f"host {host_id} is still held by {_holder(host)}; reset it once it is released")
        self._reset(HostReset(host_id=host_id, by=by))
        self.serve()

    def resolve(self, host_id: str, by: str, use_claim: int | None = None, drop: bool = False) -> list[str]:
        """End an ambiguity: keep one registration of the host (`use_claim`, 1 = the first) or
        drop the host. Returns the hosts that are no longer ambiguous."""
        host = self._host(host_id)
        if not host.ambiguous:
            raise PoolError(f"host {host_id} is not ambiguous")
        if host.holder is not None:
            raise PoolError(f"host {host_id} is {host.state} for {_holder(host)}; resolve it once it is released")
        if drop == (use_claim is not None):
            raise PoolError("say either which registration to keep (--use N) or to drop the host (--drop)")
        if drop:
            unfrozen = sorted(o for o in host.others if self._alone_with(o, host_id))
        else:
            choices = [host.spec, *host.claims]
            if not host.claims:
                raise PoolError(f"host {host_id} has one registration; it shares its address with "
                                f"{', '.join(sorted(host.others))}: drop one of them")
            if use_claim is None or not 1 <= use_claim <= len(choices):
                raise PoolError(f"host {host_id} has registrations 1 to {len(choices)}")
            chosen = choices[use_claim - 1]
            clash = sorted(self.book.at(chosen.address, chosen.port) - {host_id} - host.others)
            if clash:
                raise PoolError(f"registration {use_claim} uses {chosen.address}:{chosen.port}, which is host "
                                f"{', '.join(clash)}; resolve or remove that first")
            staying = {o for o in host.others if _same_place(self.book.hosts[o].spec, chosen)}
            unfrozen = sorted(o for o in host.others - staying if self._alone_with(o, host_id))
            if not staying:
                unfrozen = sorted([*unfrozen, host_id])
        self._resolved(AmbiguityResolved(host_id=host_id, use_claim=use_claim, dropped=drop, unfrozen=unfrozen, by=by))
        self._end_unservable(by, f"host {host_id} was {'dropped' if drop else 'registered again'}")
        self.serve()
        return unfrozen

    def _end_unservable(self, by: str, why: str) -> None:
        """The pool lost hosts: a waiting request no host set of it could serve any more ends
        now, with the reason a new one would be refused for. Left waiting, it waited for ever,
        1st in line, keeping the free hosts it could use from everyone behind it."""
        for r in self.requests.in_order():
            never = self._never(r.request)
            if never:
                self._cancelled(RequestCancelled(request_id=r.request.request_id, by=by,
                                                 reason=f"{never} ({why}): the pool can never serve it"))

    def _alone_with(self, other_id: str, host_id: str) -> bool:
        other = self.book.hosts[other_id]
        return not other.claims and other.others == {host_id}

    def _host(self, host_id: str) -> Host:
        host = self.book.get(host_id)
        if host is None:
            raise PoolError(f"no host {host_id!r} in pool {self.name}")
        return host

    # ================================================================== requesters

    def request(self, req: PoolRequest) -> str:
        """Take a request in: 'granted', 'waiting', 'refused', or 'known' (seen before)."""
        rid = req.request_id
        if self.requests.known(rid):
            return "known"
        reason = self.refusal(req)
        if reason:
            return self.refuse(req, reason)
        policy = policy_named(self.terms.policy)
        priority = priority_of(self.terms, req.tenant)
        self._accepted(RequestAccepted(request=req, priority=priority, score=policy.score(req, priority), policy=policy.name))
        self.serve()
        return "granted" if self.requests.open[rid].state == "granted" else "waiting"

    def refuse(self, req: PoolRequest, reason: str) -> str:
        if self.requests.known(req.request_id):
            return "known"
        self._refused(RequestRefused(request_id=req.request_id, tenant=req.tenant, cluster_id=req.cluster_id,
                                     reason=reason, by=req.by))
        return "refused"

    def refusal(self, req: PoolRequest) -> str:
        """Why the pool would refuse this request now ('' if it would take it)."""
        for n in req.nodes:
            try:
                parse_requirement(n.requires)
            except RequirementError as err:
                return f"node {n.node_id} (hardware type {n.hardwaretype or '?'}): {err}"
        return self.quota_refusal(req) or self._never(req)

    def quota_refusal(self, req: PoolRequest) -> str:
        """The per-job limit and the tenant's quotas alone (also for hosts a provider will make)."""
        size = len(req.nodes)
        limit = self.terms.job_limit
        if limit is not None and size > limit:
            return f"the request needs {hosts(size)}; pool {self.name} lends at most {limit} to one job"
        quota = self.terms.tenants.get(req.tenant)
        if quota is not None and quota.max_nodes is not None:
            has, waits = self.nodes_of(req.tenant)
            if has + waits + size > quota.max_nodes:
                return (f"tenant {req.tenant} may hold {quota.max_nodes} hosts of pool {self.name}: it holds {has} "
                        f"and waits for {waits}, so {size} more would exceed its quota")
        if quota is not None and quota.max_clusters is not None:
            clusters = self.clusters_of(req.tenant)
            if req.cluster_id not in clusters and len(clusters) + 1 > quota.max_clusters:
                n = quota.max_clusters
                return (f"tenant {req.tenant} may use pool {self.name} for {n} cluster{'' if n == 1 else 's'} and "
                        f"already uses it for {len(clusters)}")
        return ""

    def nodes_of(self, tenant: str) -> tuple[int, int]:
        """What counts against a tenant's `max_nodes`: the hosts it holds and those it waits for."""
        return sum(self.book.held_by_tenant.get(tenant, {}).values()), self.requests.waiting_nodes[tenant]

    def clusters_of(self, tenant: str) -> set[str]:
        """What counts against a tenant's `max_clusters`: its clusters that hold or wait for hosts."""
        return set(self.book.held_by_tenant.get(tenant, {})) | set(self.requests.waiting_clusters.get(tenant, {}))

    def _never(self, req: PoolRequest) -> str:
        """Why no host set of this pool could ever serve the request ('' if one can)."""
        counts: dict[str, int] = {}
        for n in req.nodes:
            text = parse_requirement(n.requires).text
            counts[text] = counts.get(text, 0) + 1
        every = dict(self.book.all_sigs)
        if fit(counts, every) is not None:
            return ""
        for text, need in sorted(counts.items()):
            have = sum(c for s, c in every.items() if parse_requirement(text).fits(s))
            if have < need:
                return f"pool {self.name} has {hosts(have)} that {'fits' if have == 1 else 'fit'} {text or 'any host'!r}; the request needs {need}"
        return f"pool {self.name} has {hosts(len(self.book.hosts))}; they cannot serve all {len(req.nodes)} nodes at once"

    def cancel(self, request_id: str, by: str, reason: str = "") -> bool:
        r = self.requests.open.get(request_id)
        if r is None or r.state != "waiting":
            return False
        self._cancelled(RequestCancelled(request_id=request_id, reason=reason, by=by))
        self.serve()
        return True

    def expire(self, request_id: str, now: datetime) -> bool:
        r = self.requests.open.get(request_id)
        deadline = r.request.deadline if r is not None else None
        if r is None or r.state != "waiting" or deadline is None or deadline > now:
            return False
        position = self.requests.position(request_id)
        self._expired(RequestExpired(
            request_id=request_id,
            reason=f"no hosts of pool {self.name} were free by the deadline {shown_time(deadline)} "
                   f"({ordinal(position or 0)} in line for {hosts(r.size)})",
        ))
        self.serve()
        return True

    def close(self, request_id: str, by: str, outcome: str = "") -> bool:
        if request_id not in self.requests.open:
            return False
        self._closed(RequestClosed(request_id=request_id, outcome=outcome, by=by))
        self.serve()
        return True

    def report(self, tenant: str, fact: PoolNodesReported) -> list[str]:
        """Take in what happened to nodes holding hosts; returns the hosts it changed. Only
        hosts held by the reporting tenant's nodes are touched."""
        hosts = [h for h in (self.book.held(fact.cluster_id, n) for n in fact.node_ids)
                 if h is not None and h.holder is not None and h.holder.tenant == tenant]
        by = fact.by
        if fact.status == "confirmed":
            ids = [h.spec.id for h in hosts if h.state == "assigning"]
            if ids:
                self._confirmed(HostsConfirmed(host_ids=ids, by=by))
        elif fact.status == "releasing":
            ids = [h.spec.id for h in hosts if h.state in ("assigning", "assigned")]
            if ids:
                self._release_started(HostsReleaseStarted(host_ids=ids, by=by))
        elif fact.status == "failed":
            ids = [h.spec.id for h in hosts if h.state != "error"]
            for host_id in ids:
                self._failed(HostFailed(host_id=host_id, reason=fact.reason or "reported failed", by=by))
        else:
            static = [h.spec.id for h in hosts if h.spec.kind == "static"]
            dynamic = [h.spec.id for h in hosts if h.spec.kind == "dynamic"]
            ids = static + dynamic
            if ids:
                self._release_and_serve(HostsReleased(host_ids=static, returned=dynamic, by=by))
        return ids

    def _release_and_serve(self, release: HostsReleased) -> None:
        """The release and the grants it lets the pool make, as one event (its `granted`): one
        append where a release and then each grant took one disk sync apiece. Decided on the
        pool as the release leaves it, so applied here first, then recorded without applying
        again; a fold of the event (a rebuild) applies the same in the same order."""
        self._apply_release(release)
        granted = self.serve(record=False)
        self._applied_ahead = True
        try:
            self._released(release.model_copy(update={"granted": granted}))
        finally:
            self._applied_ahead = False

    def dynamic_host(self, spec: HostSpec, holder: Holder, by: str) -> str:
        """A provider made `spec` for a node: 'added', 'known' (seen before) or 'ambiguous'."""
        spec = spec.model_copy(update={"kind": "dynamic"})
        old = self.book.get(spec.id)
        if old is not None:
            if old.spec.facts() == spec.facts() and old.holder == holder:
                return "known"
            self._ambiguous(AmbiguityDetected(
                host_id=spec.id, claim=spec, by=by,
                reason=f"a provider reports it again as {spec.address}:{spec.port} for node {holder.node_id} "
                       f"of cluster {holder.cluster_id}; the pool has {old.spec.address}:{old.spec.port}",
            ))
            return "ambiguous"
        self._added(HostsAdded(hosts=[spec], holder=holder, by=by))
        return "ambiguous" if self._mark_conflicts([spec], [spec], by) else "added"

    # ================================================================== the policy at work

    def serve(self, record: bool = True) -> list[HostsGranted]:
        """Grant waiting requests in policy order while free hosts fit them. A request that
        does not fit keeps every free host it could use from those behind it (no overtaking on
        contended hosts); those behind may still take hosts it cannot use. All or nothing per
        request: a cluster never waits holding half its hosts. `record=False`: each grant is
        applied but not recorded, for the caller to record in its own event."""
        free = self.book.free_counts()
        granted: list[HostsGranted] = []
        if not free or not self.requests.waiting:
            return granted
        for r in self.requests.in_order():
            if not any(free.values()):
                break
            plan = fit(r.counts(), free)
            if plan is None:
                for s in free:
                    if free[s] and any(parse_requirement(text).fits(s) for text in r.needs):
                        free[s] = 0
                continue
            assignments = self._pick(r, plan)
            for by_sig in plan.values():
                for s, n in by_sig.items():
                    free[s] -= n
            grant = HostsGranted(request_id=r.request.request_id, assignments=assignments, by=f"policy:{self.terms.policy}")
            if record:
                self._granted(grant)
            else:
                self._apply_grant(grant)
            granted.append(grant)
        return granted

    def _pick(self, r: OpenRequest, plan: dict[str, dict[Any, int]]) -> list[Assignment]:
        taken: dict[Any, int] = {}
        out = []
        for text in sorted(plan):
            nodes = iter(r.needs[text])
            for s in sorted(plan[text], key=sig_key):
                n, start = plan[text][s], taken.get(s, 0)
                for host_id in self.book.free[s][start : start + n]:
                    out.append(Assignment(node_id=next(nodes), host_id=host_id))
                taken[s] = start + n
        return out

    # ================================================================== views

    def position(self, request_id: str) -> int | None:
        return self.requests.position(request_id)

    def deadlines(self) -> dict[str, datetime]:
        return {rid: r.request.deadline for rid, r in self.requests.open.items()
                if r.state == "waiting" and r.request.deadline is not None}

    def assignment_of(self, cluster_id: str, node_id: str) -> Host | None:
        return self.book.held(cluster_id, node_id)

    def summary(self) -> dict[str, Any]:
        return {
            "pool": self.name, "terms": self.terms.model_dump(), "hosts": len(self.book.hosts),
            "states": dict(sorted(self.book.states().items())), "free": sum(self.book.free_counts().values()),
            "waiting": len(self.requests.waiting), "granted": sum(r.state == "granted" for r in self.requests.open.values()),
        }

    def queue_view(self) -> list[dict[str, Any]]:
        return [
            {"position": i, "request_id": r.request.request_id, "tenant": r.request.tenant,
             "cluster_id": r.request.cluster_id, "job_id": r.request.job_id, "hosts": r.size,
             "urgency": r.request.urgency, "priority": r.priority, "score": r.score,
             "deadline": r.request.deadline.isoformat() if r.request.deadline else None, "by": r.request.by}
            for i, r in enumerate(self.requests.in_order(), start=1)
        ]

    def hosts_view(self) -> list[dict[str, Any]]:
        return [self.book.hosts[i].view() for i in sorted(self.book.hosts)]

    def state(self) -> dict[str, Any]:
        """Everything the pool knows, comparable: a rebuild from the log must equal it."""
        granted = {rid: [a.model_dump() for a in r.assignments]
                   for rid, r in sorted(self.requests.open.items()) if r.state == "granted"}
        return {**self.summary(), "hosts_detail": self.hosts_view(), "queue": self.queue_view(), "grants": granted,
                "finished": dict(sorted(self.requests.finished.items())),
                "callbacks_due": sorted(f"{rid}:{on}" for rid, on in self.callbacks_due)}

    # ================================================================== events

    @event("PoolConfigured")
    def _configured(self, payload: PoolConfigured) -> None:
        self.terms = payload.terms

    @event("HostsAdded")
    def _added(self, payload: HostsAdded) -> None:
        for spec in payload.hosts:
            host = self.book.add(spec)
            if payload.holder is not None:
                host.state = "assigned"
                self.book.hold(host, payload.holder)

    @event("AmbiguityDetected")
    def _ambiguous(self, payload: AmbiguityDetected) -> None:
        host = self.book.hosts[payload.host_id]
        if payload.claim is not None:
            host.claims.append(payload.claim)
        for other_id in payload.others:
            host.others.add(other_id)
            other = self.book.hosts[other_id]
            other.others.add(host.spec.id)
            self.book.refresh(other)
        self.book.refresh(host)

    @event("AmbiguityResolved")
    def _resolved(self, payload: AmbiguityResolved) -> None:
        host = self.book.hosts[payload.host_id]
        if payload.dropped:
            self.book.forget(payload.host_id)
            return
        self.book.respec(host, [host.spec, *host.claims][(payload.use_claim or 1) - 1])
        for other_id in list(host.others):
            other = self.book.hosts[other_id]
            if not _same_place(other.spec, host.spec):
                host.others.discard(other_id)
                other.others.discard(host.spec.id)
                self.book.refresh(other)
        self.book.refresh(host)

    @event("HostRemoved")
    def _removed(self, payload: HostRemoved) -> None:
        self.book.forget(payload.host_id)

    @event("HostReset")
    def _reset(self, payload: HostReset) -> None:
        host = self.book.hosts[payload.host_id]
        host.state, host.error = "unassigned", ""
        self.book.refresh(host)

    @event("RequestAccepted")
    def _accepted(self, payload: RequestAccepted) -> None:
        self.requests.enqueue(payload.request, payload.score, payload.priority)

    @event("RequestRefused")
    def _refused(self, payload: RequestRefused) -> None:
        self.requests.finished[payload.request_id] = "refused"

    @event("HostsGranted")
    def _granted(self, payload: HostsGranted) -> None:
        self._apply_grant(payload)

    def _apply_grant(self, payload: HostsGranted) -> None:
        r = self.requests.granted(payload.request_id, payload.assignments)
        req = r.request
        for a in payload.assignments:
            host = self.book.hosts[a.host_id]
            host.state = "assigning"
            self.book.hold(host, Holder(tenant=req.tenant, cluster_id=req.cluster_id, node_id=a.node_id,
                                        request_id=req.request_id))
        if req.callback is not None:
            self.callbacks_due[(req.request_id, "grant")] = {"target": req.callback, "tenant": req.tenant, "body": {
                "type": "granted", "pool": self.name, "request_id": req.request_id, "cluster_id": req.cluster_id,
                "hosts": [{"node_id": a.node_id, **_reach(self.book.hosts[a.host_id].spec)} for a in payload.assignments],
            }}

    @event("HostsConfirmed")
    def _confirmed(self, payload: HostsConfirmed) -> None:
        for host_id in payload.host_ids:
            self.book.hosts[host_id].state = "assigned"

    @event("HostsReleaseStarted")
    def _release_started(self, payload: HostsReleaseStarted) -> None:
        for host_id in payload.host_ids:
            self.book.hosts[host_id].state = "unassigning"

    @event("HostsReleased")
    def _released(self, payload: HostsReleased) -> None:
        if self._applied_ahead:
            return  # `_release_and_serve` applied it while deciding
        self._apply_release(payload)
        for grant in payload.granted:
            self._apply_grant(grant)

    def _apply_release(self, payload: HostsReleased) -> None:
        for host_id in payload.host_ids:
            host = self.book.hosts[host_id]
            if host.state != "error":
                host.state = "unassigned"
            self.book.hold(host, None)
        for host_id in payload.returned:
            self.book.forget(host_id)

    @event("HostFailed")
    def _failed(self, payload: HostFailed) -> None:
        host = self.book.hosts[payload.host_id]
        host.state, host.error = "error", payload.reason
        self.book.refresh(host)

    @event("RequestCancelled")
    def _cancelled(self, payload: RequestCancelled) -> None:
        self._ended(payload.request_id, "cancelled", payload.reason)

    @event("RequestExpired")
    def _expired(self, payload: RequestExpired) -> None:
        self._ended(payload.request_id, "expired", payload.reason)

    @event("RequestClosed")
    def _closed(self, payload: RequestClosed) -> None:
        self._ended(payload.request_id, "closed", payload.outcome)

    def _ended(self, request_id: str, how: str, why: str) -> None:
        r = self.requests.finish(request_id, how)
        if r is not None and r.request.callback is not None:
            self.callbacks_due[(request_id, "end")] = {"target": r.request.callback, "tenant": r.request.tenant, "body": {
                "type": "ended", "pool": self.name, "request_id": request_id, "cluster_id": r.request.cluster_id,
                "how": how, "reason": why,
            }}

    @event("CallbackDelivered")
    def _delivered(self, payload: CallbackDelivered) -> None:
        self.callbacks_due.pop((payload.request_id, payload.on), None)

    def delivered(self, request_id: str, on: str, target: str, attempts: int, error: str = "") -> None:
        if (request_id, on) in self.callbacks_due:
            self._delivered(CallbackDelivered(request_id=request_id, on=on, target=target,  # type: ignore[arg-type]
                                              attempts=attempts, ok=not error, error=error))


def _same_place(a: HostSpec, b: HostSpec) -> bool:
    return (a.address.lower(), a.port) == (b.address.lower(), b.port)


def _keys(spec: HostSpec) -> str:
    return ", ".join(k.split()[0] + " " + k.split()[1][-12:] for k in spec.host_keys)


def _holder(host: Host) -> str:
    h = host.holder
    return f"node {h.node_id} of cluster {h.cluster_id} (tenant {h.tenant})" if h else "nobody"


def hosts(n: int) -> str:
    """`1 host`, `3 hosts`."""
    return f"{n} host{'' if n == 1 else 's'}"


def ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _reach(spec: HostSpec) -> dict[str, Any]:
    return {"host_id": spec.id, "address": spec.address, "port": spec.port, "user": spec.user,
            "host_keys": list(spec.host_keys)}

