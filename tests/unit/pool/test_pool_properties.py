"""Random histories of a pool: whatever happens, no host is ever lent twice, nothing ambiguous
or in error is lent at all, quotas hold, nobody waits while hosts fit them, and the pool
rebuilt from its events equals the live one."""

from __future__ import annotations

from typing import Any

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from pool_support import host, pool, request

from contracts.pools import PoolNodesReported, PoolTerms, TenantTerms, grants_in
from services.pool.domain.pool import PoolError

TENANTS = ["a", "b", "c"]
QUOTA = {"a": 6, "b": 4}
REQUIRES = ["", "cpu >= 8", "labels contains ssd", "cpu < 8"]
PROPS: list[dict[str, Any]] = [{"cpu": 16, "labels": ["ssd"]}, {"cpu": 4}, {"cpu": 8}, {"cpu": 2, "labels": ["ssd"]}]


class PoolHistory(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.p = pool()
        self.p.configure(PoolTerms(tenants={t: TenantTerms(priority=i + 1, max_nodes=QUOTA.get(t))
                                            for i, t in enumerate(TENANTS)}, job_limit=5), by="admin")
        self.shadow: Any = None
        self.p.add_hosts([host(100 + i, **PROPS[i % len(PROPS)]) for i in range(8)], by="admin")
        self.next_host = 0
        self.next_request = 0
        self.grants = 0

    # -- what can happen ---------------------------------------------------------------

    @rule(n=st.integers(1, 4), kind=st.integers(0, len(PROPS) - 1), clash=st.booleans())
    def add_hosts(self, n: int, kind: int, clash: bool) -> None:
        specs = []
        for _ in range(n):
            self.next_host += 1
            specs.append(host(self.next_host, **PROPS[kind]))
        if clash and self.p.book.hosts:  # re-register a known id elsewhere, or a known address
            old = sorted(self.p.book.hosts)[self.next_host % len(self.p.book.hosts)]
            specs.append(host(old, address=f"moved-{self.next_host}") if n % 2 else host(f"x{self.next_host}", address=f"{old}.lab"))
        self._try(lambda: self.p.add_hosts(specs, by="admin"))

    @rule(tenant=st.sampled_from(TENANTS), size=st.integers(1, 6), requires=st.sampled_from(REQUIRES),
          urgency=st.integers(0, 100), same_cluster=st.booleans())
    def ask(self, tenant: str, size: int, requires: str, urgency: int, same_cluster: bool) -> None:
        self.next_request += 1
        rid = f"r{self.next_request}"
        cluster = f"c-{tenant}" if same_cluster else None
        req = request(rid, size, tenant=tenant, requires=requires, urgency=urgency, cluster=cluster)
        if same_cluster:  # node ids unique within the cluster
            req = req.model_copy(update={"nodes": [n.model_copy(update={"node_id": f"{rid}n{i}"}) for i, n in enumerate(req.nodes)]})
        self.p.request(req)

    @precondition(lambda self: self.p.book.holders)
    @rule(i=st.integers(0, 10_000), status=st.sampled_from(["confirmed", "releasing", "released", "released", "failed"]))
    def report(self, i: int, status: str) -> None:
        held = sorted(self.p.book.holders)
        cluster, node = held[i % len(held)]
        tenant = self.p.book.held(cluster, node).holder.tenant
        self.p.report(tenant, PoolNodesReported(request_id="x", cluster_id=cluster, status=status,  # type: ignore[arg-type]
                                                node_ids=[node], reason="test", by="planner"))

    @precondition(lambda self: self.p.book.hosts)
    @rule(i=st.integers(0, 10_000), what=st.sampled_from(["reset", "remove", "drop", "use1", "use2"]))
    def administer(self, i: int, what: str) -> None:
        ids = sorted(self.p.book.hosts)
        h = ids[i % len(ids)]
        actions = {
            "reset": lambda: self.p.reset(h, by="admin"),
            "remove": lambda: self.p.remove_host(h, by="admin"),
            "drop": lambda: self.p.resolve(h, by="admin", drop=True),
            "use1": lambda: self.p.resolve(h, by="admin", use_claim=1),
            "use2": lambda: self.p.resolve(h, by="admin", use_claim=2),
        }
        self._try(actions[what])

    @precondition(lambda self: self.p.requests.open)
    @rule(i=st.integers(0, 10_000), close=st.booleans())
    def end_request(self, i: int, close: bool) -> None:
        ids = sorted(self.p.requests.open)
        rid = ids[i % len(ids)]
        if close:
            self.p.close(rid, by="planner", outcome="done")
        else:
            self.p.cancel(rid, by="user")

    def _try(self, action: Any) -> None:
        """An administrator's refused command records nothing."""
        before = len(self.p.pending_events)
        try:
            action()
        except PoolError:
            assert len(self.p.pending_events) == before

    # -- what must always hold -----------------------------------------------------------

    @invariant()
    def every_grant_takes_free_hosts_only(self) -> None:
        """Replay the new events one by one on a shadow pool: at each grant, every host it
        hands out is free (unassigned, unheld, not ambiguous, not in error) just before."""
        for e in self.p.collect_events():
            payload = e.payload
            freed = set(payload.host_ids) if payload.type == "HostsReleased" else set()
            hosts = [a.host_id for g in grants_in(payload) for a in g.assignments]
            self.grants += len(grants_in(payload))
            assert len(set(hosts)) == len(hosts)
            for h in hosts:  # free, or freed by the release that grants it (and not in error)
                was = self.shadow.book.hosts[h]
                assert was.free or (h in freed and was.state != "error" and not was.ambiguous), f"{h} granted while {was.view()}"
            if payload.type == "HostsAdded" and payload.holder is None:
                assert all(h.id not in self.shadow.book for h in payload.hosts) if self.shadow else True
            self.shadow = e.mutate(self.shadow)

    @invariant()
    def the_indexes_agree_with_the_hosts(self) -> None:
        book = self.p.book
        free = {h for ids in book.free.values() for h in ids}
        assert free == {i for i, h in book.hosts.items() if h.free}
        assert book.holders == {(h.holder.cluster_id, h.holder.node_id): i for i, h in book.hosts.items() if h.holder}

    @invariant()
    def quotas_hold(self) -> None:
        for tenant, quota in QUOTA.items():
            held = sum(self.p.book.held_by_tenant.get(tenant, {}).values())
            assert held + self.p.requests.waiting_nodes[tenant] <= quota

    @invariant()
    def nobody_waits_while_hosts_fit_them(self) -> None:
        assert self.p.serve() == []

    @invariant()
    def the_rebuilt_pool_equals_the_live_one(self) -> None:
        assert self.shadow is not None and self.shadow.state() == self.p.state()

    def teardown(self) -> None:
        event(f"grants: {min(self.grants, 5)}{'+' if self.grants >= 5 else ''}")
        event(f"ambiguous hosts seen: {any(h.ambiguous for h in self.p.book.hosts.values())}")
        event(f"hosts in error: {any(h.state == 'error' for h in self.p.book.hosts.values())}")


PoolHistory.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
test_pool_histories = PoolHistory.TestCase
