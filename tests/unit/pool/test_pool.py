"""The Pool aggregate, decision by decision."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pool_support import host, host_key, pool, request, types

from contracts.pools import Callback, Holder, PoolNodesReported, PoolTerms, TenantTerms
from contracts.records import Recorded
from muster.bus.repository import fold
from services.pool.domain.pool import Pool, PoolError


def report(p: Pool, status: str, cluster: str, *nodes: str, tenant: str = "t1", reason: str = "") -> list[str]:
    return p.report(tenant, PoolNodesReported(request_id="r", cluster_id=cluster, status=status,  # type: ignore[arg-type]
                                              node_ids=list(nodes), reason=reason, by="planner"))


def holders(p: Pool) -> dict[str, str]:
    return {h: f"{p.book.hosts[h].holder.cluster_id}/{p.book.hosts[h].holder.node_id}"  # type: ignore[union-attr]
            for h in sorted(p.book.hosts) if p.book.hosts[h].holder is not None}


def replayed(p: Pool) -> Pool:
    """The aggregate rebuilt from every event it recorded (as a pool service would)."""
    events = p.collect_events()
    rebuilt: Any = None
    for e in events:
        rebuilt = e.mutate(rebuilt)
    return rebuilt


# -- hosts and administrators ------------------------------------------------------------------


def test_added_hosts_are_unassigned_and_each_add_is_an_event_with_its_principal() -> None:
    p = pool()
    p.add_hosts([host(1), host(2)], by="alice")
    assert types(p) == ["PoolCreated", "HostsAdded"]
    assert p.pending_events[-1].payload.by == "alice"
    assert p.summary()["states"] == {"unassigned": 2} and p.summary()["free"] == 2


def test_a_big_add_is_split_into_bounded_events() -> None:
    p = pool()
    p.add_hosts([host(i) for i in range(450)], by="alice")
    assert types(p) == ["PoolCreated", "HostsAdded", "HostsAdded", "HostsAdded"]


def test_adding_a_host_again_with_the_same_facts_is_refused_and_records_nothing() -> None:
    p = pool(2)
    p.collect_events()
    with pytest.raises(PoolError, match="already in pool p: h001"):
        p.add_hosts([host(5), host(1)], by="alice")
    with pytest.raises(PoolError, match="listed twice in one add: h007"):
        p.add_hosts([host(7), host(7)], by="alice")
    assert types(p) == [] and "h005" not in p.book


def test_same_id_with_another_address_or_key_freezes_the_host_until_resolved() -> None:
    p = pool(1)
    p.add_hosts([host(0, address="elsewhere")], by="mallory")
    p.add_hosts([host(0, key=host_key("other"))], by="mallory")
    h = p.book.hosts["h000"]
    assert h.ambiguous and len(h.claims) == 2 and p.summary()["free"] == 0
    event = p.pending_events[-1].payload
    assert event.type == "AmbiguityDetected" and event.by == "mallory" and "registered again as" in event.reason
    p.request(request("r1", 1))
    assert p.position("r1") == 1  # an ambiguous host is lent to nobody
    assert p.resolve("h000", by="alice", use_claim=2) == ["h000"]
    assert p.book.hosts["h000"].spec.address == "elsewhere"
    assert holders(p) == {"h000": "c-r1/n0"}  # resolved: the waiting request is served at once
    assert p.pending_events[-2].payload.by == "alice"


def test_one_address_under_two_ids_freezes_both_until_one_is_dropped() -> None:
    p = pool(1)
    p.add_hosts([host("dup", address="h000.lab")], by="bob")
    assert p.book.hosts["h000"].ambiguous and p.book.hosts["dup"].ambiguous
    with pytest.raises(PoolError, match="shares its address with h000: drop one"):
        p.resolve("dup", by="alice", use_claim=1)
    assert p.resolve("dup", by="alice", drop=True) == ["h000"]
    assert "dup" not in p.book and not p.book.hosts["h000"].ambiguous and p.summary()["free"] == 1


def test_resolving_is_refused_when_it_makes_no_sense() -> None:
    p = pool(2)
    with pytest.raises(PoolError, match="not ambiguous"):
        p.resolve("h000", by="a", drop=True)
    with pytest.raises(PoolError, match="no host 'zz' in pool p"):
        p.resolve("zz", by="a", drop=True)
    p.add_hosts([host(0, address="h001.lab")], by="a")  # h000's new claim sits where h001 is
    with pytest.raises(PoolError, match="either which registration"):
        p.resolve("h000", by="a")
    with pytest.raises(PoolError, match="registrations 1 to 2"):
        p.resolve("h000", by="a", use_claim=3)
    with pytest.raises(PoolError, match="uses h001.lab:22, which is host h001"):
        p.resolve("h000", by="a", use_claim=2)


def test_an_ambiguous_host_in_use_stays_with_its_node_and_is_resolved_after_release() -> None:
    p = pool(1)
    p.request(request("r1", 1))
    p.add_hosts([host(0, address="moved")], by="a")
    assert holders(p) == {"h000": "c-r1/n0"}
    with pytest.raises(PoolError, match="resolve it once it is released"):
        p.resolve("h000", by="a", use_claim=1)
    report(p, "released", "c-r1", "n0")
    assert p.summary()["free"] == 0  # released, but still frozen
    p.resolve("h000", by="a", use_claim=1)
    assert p.summary()["free"] == 1


def test_remove_host_refuses_a_host_in_use_and_unknown_hosts() -> None:
    p = pool(2)
    p.request(request("r1", 1))
    with pytest.raises(PoolError, match="h000 is assigning for node n0 of cluster c-r1"):
        p.remove_host("h000", by="a")
    with pytest.raises(PoolError, match="no host 'nope'"):
        p.remove_host("nope", by="a")
    p.remove_host("h001", by="a", reason="retired")
    assert "h001" not in p.book and types(p)[-1] == "HostRemoved"


def test_a_waiting_request_the_pool_can_no_longer_serve_ends_when_a_host_leaves() -> None:
    """Removed (or dropped as ambiguous), the pool has too few hosts for a request in line:
    it ends with the reason a new one would be refused for. Before, it waited for ever, 1st in
    line, keeping from those behind the free hosts it could use."""
    p = pool(3)
    p.request(request("hold", 1))
    assert p.request(request("big", 3, urgency=90)) == "waiting"
    assert p.request(request("one", 1, urgency=10)) == "waiting"  # behind big, which keeps the two free hosts
    p.remove_host("h002", by="admin", reason="retired")
    assert types(p)[-3:] == ["HostRemoved", "RequestCancelled", "HostsGranted"]
    ended = p.pending_events[-2].payload
    assert ended.request_id == "big" and ended.by == "admin"
    assert ended.reason == ("pool p has 2 hosts that fit 'any host'; the request needs 3 (host h002 was removed): "
                            "the pool can never serve it")
    assert p.requests.finished["big"] == "cancelled" and holders(p)["h001"] == "c-one/n0"  # the next one is served
    assert replayed(p).state() == p.state()

    q = pool(2)
    q.request(request("hold", 1))
    q.add_hosts([host("dup", address="h001.lab")], by="bob")  # h001 and dup: frozen, 3 hosts
    assert q.request(request("two", 2)) == "waiting" and q.request(request("three", 3)) == "waiting"
    q.resolve("dup", by="admin", drop=True)
    assert q.position("two") == 1 and q.requests.finished["three"] == "cancelled"  # 2 hosts: two may still be served
    assert "(host dup was dropped)" in q.pending_events[-1].payload.reason


def test_new_terms_end_the_waiting_requests_they_refuse_and_keep_those_ahead() -> None:
    """A quota lowered, a per-job limit set: what waits beyond them ends in the words a new
    request would be refused in. Before, it was granted as the old terms allowed (a tenant
    limited to 1 host got 3)."""
    p = pool(4)
    p.request(request("hold", 4, tenant="other"))
    for rid, n, urgency in (("first", 1, 90), ("second", 2, 50), ("big", 3, 10)):
        assert p.request(request(rid, n, urgency=urgency)) == "waiting"
    p.configure(PoolTerms(tenants={"t1": TenantTerms(max_nodes=2)}), by="admin")
    assert [e.payload.request_id for e in p.pending_events if e.payload.type == "RequestCancelled"] == ["second", "big"]
    said = p.pending_events[-1].payload.reason
    assert said == ("tenant t1 may hold 2 hosts of pool p: it holds and waits ahead of this request for 1, so 3 more "
                    "would exceed its quota (the pool's terms changed while it waited)")
    assert p.position("first") == 1
    p.configure(PoolTerms(job_limit=2, tenants={"t1": TenantTerms(max_nodes=2)}), by="admin")  # nothing more to end
    assert p.request(request("two", 1)) == "waiting"
    report(p, "released", "c-hold", "n0", "n1", "n2", "n3", tenant="other")
    assert sum(p.book.held_by_tenant["t1"].values()) == 2  # within the quota
    assert replayed(p).state() == p.state()


# -- requests, grants, the life of a host --------------------------------------------------------


def test_a_request_that_fits_is_granted_at_once_and_the_host_goes_through_its_states() -> None:
    p = pool(3)
    assert p.request(request("r1", 2)) == "granted"
    assert holders(p) == {"h000": "c-r1/n0", "h001": "c-r1/n1"}
    assert p.book.hosts["h000"].state == "assigning"
    granted = p.pending_events[-1].payload
    assert granted.type == "HostsGranted" and granted.by == "policy:urgency-x-priority"
    assert report(p, "confirmed", "c-r1", "n0", "n1") == ["h000", "h001"]
    assert p.book.hosts["h000"].state == "assigned"
    report(p, "releasing", "c-r1", "n0")
    assert p.book.hosts["h000"].state == "unassigning"
    report(p, "released", "c-r1", "n0")
    assert p.book.hosts["h000"].state == "unassigned" and holders(p) == {"h001": "c-r1/n1"}


def test_a_request_that_does_not_fit_waits_and_is_served_when_hosts_are_released() -> None:
    p = pool(2)
    p.request(request("r1", 2))
    assert p.request(request("r2", 1)) == "waiting"
    assert p.position("r2") == 1 and p.queue_view()[0]["hosts"] == 1
    p.collect_events()
    report(p, "released", "c-r1", "n1")
    [released] = [e.payload for e in p.collect_events()]
    assert released.type == "HostsReleased" and released.host_ids == ["h001"]
    assert [(g.request_id, [a.host_id for a in g.assignments]) for g in released.granted] == [("r2", ["h001"])]
    assert holders(p) == {"h000": "c-r1/n0", "h001": "c-r2/n0"} and p.position("r2") is None


def test_a_release_and_its_grants_fold_as_one_event_and_as_a_v1_history() -> None:
    """The live pool, its events folded (a rebuild), and the same history as a v1 log would
    hold it (the release, then each grant as its own event) end in the same state."""
    p = pool(3)
    p.request(request("r1", 3))
    p.request(request("r2", 1))
    p.request(request("r3", 2, urgency=10))
    report(p, "released", "c-r1", "n0", "n2")
    events = [e.payload for e in p.collect_events()]
    assert [g.request_id for g in events[-1].granted] == ["r2"]  # r3 (2 hosts) waits behind r2; 1 host stays free

    v1: list[Any] = []
    for e in events:
        if e.type == "HostsReleased":
            v1 += [e.model_copy(update={"v": 1, "granted": []}), *e.granted]
        else:
            v1.append(e)
    for history in (events, v1):
        folded: Any = None
        for i, e in enumerate(history, start=1):
            folded = fold(Pool, folded, Recorded(i, "muster.evt._system.pool.p", datetime.now(UTC), e, str(p.id), i))
        assert folded.state() == p.state()


def test_waiting_requests_are_served_by_urgency_times_priority_then_arrival() -> None:
    p = pool(1)
    p.configure(PoolTerms(tenants={"gold": TenantTerms(priority=3), "lead": TenantTerms(priority=1)}), by="admin")
    p.request(request("hold", 1, tenant="lead"))
    p.request(request("lead-a", 1, tenant="lead", urgency=100))   # 100
    p.request(request("gold-a", 1, tenant="gold", urgency=40))    # 120
    p.request(request("lead-b", 1, tenant="lead", urgency=100))   # 100, later
    p.request(request("std", 1, tenant="other", urgency=50))      # default priority 1: 50
    assert [q["request_id"] for q in p.queue_view()] == ["gold-a", "lead-a", "lead-b", "std"]
    served = []
    for cluster in ["c-hold", "c-gold-a", "c-lead-a", "c-lead-b"]:
        tenant = "gold" if "gold" in cluster else "lead"
        report(p, "released", cluster, "n0", tenant=tenant)
        served.append(holders(p)["h000"].split("/")[0])
    assert served == ["c-gold-a", "c-lead-a", "c-lead-b", "c-std"]


def test_the_first_in_line_keeps_the_hosts_it_could_use_but_not_the_others() -> None:
    p = pool()
    p.add_hosts([host(i, cpu=16) for i in range(2)] + [host(i, cpu=2) for i in range(2, 4)], by="a")
    p.request(request("big-holder", 1, requires="cpu >= 8"))
    assert p.request(request("big", 2, requires="cpu >= 8", urgency=90)) == "waiting"  # 1 big host free
    assert p.request(request("little", 1, requires="", urgency=10)) == "granted"
    # 'little' could use any host, but the free big one is kept for 'big'.
    assert holders(p) == {"h000": "c-big-holder/n0", "h002": "c-little/n0"}
    assert p.request(request("after", 1, requires="cpu >= 8", urgency=10)) == "waiting"
    assert p.position("big") == 1 and p.position("after") == 2


def test_requests_get_only_hosts_whose_properties_fit_their_nodes() -> None:
    p = pool()
    p.add_hosts([host(0, cpu=16, labels=["ssd"]), host(1, cpu=16), host(2, cpu=2, labels=["ssd"])], by="a")
    r = request("r1", 2)
    r = r.model_copy(update={"nodes": [r.nodes[0].model_copy(update={"requires": "cpu >= 8, labels contains ssd"}),
                                       r.nodes[1].model_copy(update={"requires": "labels contains ssd"})]})
    assert p.request(r) == "granted"
    assert holders(p) == {"h000": "c-r1/n0", "h002": "c-r1/n1"}


def test_one_host_is_said_as_one() -> None:
    assert pool(1).refusal(request("r", 2)) == "pool p has 1 host that fits 'any host'; the request needs 2"  # ("1 hosts that fit")


@pytest.mark.parametrize("req,terms,reason", [
    (request("r", 1, requires="cpu >> 2"), PoolTerms(), "node n0 (hardware type hw): clause 1 'cpu >> 2'"),
    (request("r", 5), PoolTerms(job_limit=4), "the request needs 5 hosts; pool p lends at most 4 to one job"),
    (request("r", 1, requires="cpu >= 64"), PoolTerms(), "pool p has 0 hosts that fit 'cpu >= 64'; the request needs 1"),
    (request("r", 9), PoolTerms(), "pool p has 6 hosts that fit 'any host'; the request needs 9"),
    (request("r", 3, tenant="q"), PoolTerms(tenants={"q": TenantTerms(max_nodes=4)}),
     "tenant q may hold 4 hosts of pool p: it holds 2 and waits for 0, so 3 more would exceed its quota"),
    (request("r", 1, tenant="q"), PoolTerms(tenants={"q": TenantTerms(max_clusters=1)}),
     "tenant q may use pool p for 1 cluster and already uses it for 1"),
])
def test_bad_or_excessive_requests_are_refused_with_a_reason(req: Any, terms: PoolTerms, reason: str) -> None:
    p = pool(6)
    p.configure(terms, by="admin")
    p.request(request("held", 2, tenant="q"))
    p.collect_events()
    assert p.request(req) == "refused"
    [refused] = p.collect_events()
    assert refused.payload.reason.startswith(reason) and refused.payload.by == req.by
    assert p.request(req) == "known"  # seen before: nothing more


def test_an_expand_of_a_cluster_the_tenant_already_has_is_not_a_new_cluster_for_its_quota() -> None:
    p = pool(6)
    p.configure(PoolTerms(tenants={"q": TenantTerms(max_clusters=1)}), by="admin")
    p.request(request("create", 2, tenant="q", cluster="c1"))
    more = request("expand", 1, tenant="q", cluster="c1")
    more = more.model_copy(update={"nodes": [more.nodes[0].model_copy(update={"node_id": "n9"})]})
    assert p.request(more) == "granted"


def test_quota_counts_waiting_requests_so_grants_never_exceed_it() -> None:
    p = pool(2)
    p.configure(PoolTerms(tenants={"q": TenantTerms(max_nodes=3)}), by="admin")
    p.request(request("a", 2, tenant="q"))
    assert p.request(request("b", 1, tenant="q")) == "waiting"
    assert p.request(request("c", 1, tenant="q")) == "refused"


def test_a_waiting_request_can_be_cancelled_and_those_behind_move_up() -> None:
    p = pool(1)
    for rid in ("hold", "a", "b"):
        p.request(request(rid, 1))
    assert p.cancel("a", by="bob", reason="changed my mind")
    assert p.position("b") == 1 and p.pending_events[-1].payload.by == "bob"
    assert not p.cancel("a", by="bob") and not p.cancel("hold", by="bob")  # not waiting: nothing to cancel


def test_a_cancelled_head_of_line_lets_those_behind_take_what_it_kept() -> None:
    p = pool(2)
    p.request(request("hold", 1))
    p.request(request("big", 2, urgency=90))
    p.request(request("one", 1, urgency=10))
    assert p.position("one") == 2
    p.cancel("big", by="bob")
    assert holders(p)["h001"] == "c-one/n0"


def test_a_deadline_expires_the_request_only_once_it_has_passed() -> None:
    p = pool(1)
    p.request(request("hold", 1))
    deadline = datetime(2030, 1, 1, tzinfo=UTC)
    p.request(request("late", 1, deadline=deadline))
    assert p.deadlines() == {"late": deadline}
    assert not p.expire("late", deadline - timedelta(seconds=1))
    assert p.expire("late", deadline)
    reason = p.pending_events[-1].payload.reason
    # As people read times (muster.times), not ISO 8601 with microseconds (session 32).
    assert reason == "no hosts of pool p were free by the deadline 2030-01-01 00:00:00 UTC (1st in line for 1 host)"
    assert p.deadlines() == {} and not p.expire("late", deadline)


def test_a_failed_host_goes_to_error_and_is_lent_again_only_after_a_reset() -> None:
    p = pool(1)
    p.request(request("r1", 1))
    report(p, "failed", "c-r1", "n0", reason="confirm: host key verification failed")
    assert p.book.hosts["h000"].state == "error"
    with pytest.raises(PoolError, match="still held by node n0 of cluster c-r1"):
        p.reset("h000", by="admin")
    report(p, "released", "c-r1", "n0")
    assert p.book.hosts["h000"].state == "error" and p.book.hosts["h000"].holder is None
    p.request(request("r2", 1))
    assert p.position("r2") == 1
    p.reset("h000", by="admin")
    assert holders(p) == {"h000": "c-r2/n0"}
    with pytest.raises(PoolError, match="h000 is assigning; only a host in error can be reset"):
        p.reset("h000", by="admin")


def test_reports_from_another_tenant_touch_nothing() -> None:
    p = pool(1)
    p.request(request("r1", 1, tenant="a"))
    assert report(p, "released", "c-r1", "n0", tenant="b") == []
    assert holders(p) == {"h000": "c-r1/n0"}


def test_reports_seen_twice_change_nothing_twice() -> None:
    p = pool(1)
    p.request(request("r1", 1))
    report(p, "released", "c-r1", "n0")
    p.collect_events()
    assert report(p, "released", "c-r1", "n0") == [] and types(p) == []


def test_a_dynamic_host_is_held_by_its_node_at_once_and_returned_at_release() -> None:
    p = pool()
    holder = Holder(tenant="t1", cluster_id="c1", node_id="n0", request_id="j1")
    made = host("vm-1").model_copy(update={"kind": "static"})
    assert p.dynamic_host(made, holder, by="provisioner") == "added"
    assert p.book.hosts["vm-1"].spec.kind == "dynamic" and p.book.hosts["vm-1"].state == "assigned"
    assert p.dynamic_host(made, holder, by="provisioner") == "known"
    report(p, "released", "c1", "n0")
    assert "vm-1" not in p.book
    assert p.pending_events[-1].payload.returned == ["vm-1"]


def test_callbacks_are_due_on_grant_and_on_end_until_delivered() -> None:
    p = pool(1)
    p.request(request("r1", 1, callback=Callback(url="http://example.test/hook")))
    assert set(p.callbacks_due) == {("r1", "grant")}
    assert p.callbacks_due[("r1", "grant")]["body"]["hosts"][0]["host_id"] == "h000"
    p.delivered("r1", "grant", "http://example.test/hook", attempts=2)
    p.close("r1", by="planner", outcome="succeeded")
    assert set(p.callbacks_due) == {("r1", "end")}


def test_a_configured_unknown_policy_is_refused() -> None:
    p = pool(1)
    with pytest.raises(PoolError, match="unknown policy"):
        p.configure(PoolTerms(policy="coin-toss"), by="admin")


def test_the_pool_rebuilt_from_its_events_equals_the_pool_that_recorded_them() -> None:
    p = pool(4)
    p.configure(PoolTerms(tenants={"a": TenantTerms(priority=2)}), by="admin")
    p.request(request("r1", 3, tenant="a"))
    p.request(request("r2", 2, tenant="b", callback=Callback(url="http://x.test/")))
    p.add_hosts([host("twin", address="h003.lab")], by="admin")
    report(p, "failed", "c-r1", "n2", tenant="a")
    report(p, "released", "c-r1", "n1", "n2", tenant="a")
    p.request(request("r3", 1, tenant="a", deadline=datetime(2031, 1, 1, tzinfo=UTC)))
    before = p.state()
    assert replayed(p).state() == before


def test_host_counts_read_as_words() -> None:
    from services.pool.domain.pool import hosts
    from services.tracker.render import resources_line

    assert [hosts(n) for n in (0, 1, 2)] == ["0 hosts", "1 host", "2 hosts"]
    assert resources_line({"hosts": 1, "pool": "lab", "position": 1}) == "waiting for 1 host of pool lab: 1st in line"
    # A job whose deadline passed is over: it waits no more (session 32: `waiting for 3 hosts of
    # pool lab: not in line ...` under `error: ... no hosts of pool lab were free by the deadline`).
    assert resources_line({"hosts": 3, "pool": "lab", "position": None}, ended=True) == (
        "asked for 3 hosts of pool lab: none granted before the job ended")
    assert resources_line({"hosts": 3, "pool": "lab", "granted": True}, ended=True) == "granted 3 hosts of pool lab"


def test_a_tenants_terms_show_what_counts_against_its_quotas() -> None:
    """The console's pool page (docs/ui.md): the same counts the quota refusals use."""
    from services.pool.domain.views import terms_for

    p = pool(3)
    p.configure(PoolTerms(default_priority=2, job_limit=3, tenants={"a": TenantTerms(priority=5, max_nodes=4, max_clusters=2)}),
                by="admin")
    p.request(request("r1", 2, tenant="a"))  # granted
    p.request(request("r2", 2, tenant="a"))  # waits: one host is free
    p.request(request("r3", 1, tenant="b"))
    assert terms_for(p, "a") == {"tenant": "a", "policy": "urgency-x-priority", "priority": 5, "max_nodes": 4,
                                 "max_clusters": 2, "job_limit": 3, "held": 2, "waiting": 2, "clusters": 2}
    assert terms_for(p, "c") == {"tenant": "c", "policy": "urgency-x-priority", "priority": 2, "max_nodes": None,
                                 "max_clusters": None, "job_limit": 3, "held": 0, "waiting": 0, "clusters": 0}
    refused = p.refusal(request("r4", 1, tenant="a"))
    assert refused == "tenant a may hold 4 hosts of pool p: it holds 2 and waits for 2, so 1 more would exceed its quota"
