"""Cluster leases (#17.4, Coopr's administration.leaseduration): the expiry is a logged fact and
a timer rebuilt from the log; at expiry the owner starts a delete job (after the running job,
if the cluster is busy); extensions stay within the template's step and max."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from planner_harness import Harness, OwnedWhere, demo_catalog

from contracts.commands import Accepted, ConfigureCluster, CreateCluster, ExtendLease, LeaseExtended, Rejected
from muster.times import NO_LEASE_END
from services.planner.config import PlannerConfig
from services.planner.domain.leases import duration_s

HOUR = 3600.0


def leased(initial: Any = "1h", max_: Any = "3h", step: Any = "1h", **ports: Any) -> Harness:
    catalog = demo_catalog()
    template = catalog.clustertemplates["hadoop-small"]
    catalog.clustertemplates["hadoop-small"] = template.model_copy(
        update={"administration": {"leaseduration": {"initial": initial, "max": max_, "step": step}}})
    # Tasks may be held for hours here: no attempt times out meanwhile.
    return Harness(catalog=catalog, config=PlannerConfig(instance="planner-test", task_timeout_s=100 * HOUR), **ports)


async def _create(h: Harness, **extra: Any) -> str:
    return (await h.ok(CreateCluster(name="leased", template="hadoop-small", nodes=2, **extra))).cluster_id


def _deletes(h: Harness) -> list[Any]:
    return [r.event for r in h.log.records if r.type == "JobRequested" and r.event.operation == "delete"]


@pytest.mark.parametrize(("value", "seconds"), [
    (0, 0.0), ("0", 0.0), ("min", 0.0), ("max", 0.0), (3_600_000, HOUR), ("3600000", HOUR),
    ("90s", 90.0), ("15m", 900.0), ("2h", 7200.0), ("7d", 7 * 86400.0),
])
def test_coopr_durations(value: Any, seconds: float) -> None:
    assert duration_s(value) == seconds


@pytest.mark.parametrize("value", ["2w", "-1", "h", True, -5, [1]])
def test_bad_durations_are_refused_by_name(value: Any) -> None:
    with pytest.raises(ValueError, match="initial"):
        duration_s(value, "initial")


async def test_a_lease_expires_into_a_delete_job() -> None:
    h = leased()
    created_at = h.clock.now()
    cid = await _create(h)
    cluster = h.cluster(cid)
    assert cluster.expires_at == created_at + timedelta(hours=1) and cluster.lease_max_at == created_at + timedelta(hours=3)
    assert cluster.summary()["expires_at"] == cluster.expires_at.isoformat()
    assert "ClusterLeaseChanged" in h.log.types(f"muster.evt.default.cluster.{cid}")
    await h.clock.advance(HOUR - 5)
    assert _deletes(h) == []
    await h.clock.advance(10)
    [delete] = _deletes(h)
    assert delete.requested_by == "lease-expiry" and delete.cluster_id == cid
    await h.settle()
    assert h.cluster(cid).status == "deleted" and h.planner.timers.armed("lease") == []


async def test_extensions_stay_within_step_and_max_and_move_the_timer() -> None:
    h = leased()
    cid = await _create(h)
    first = h.cluster(cid).expires_at
    assert first is not None
    reply = await h.send(ExtendLease(cluster_id=cid, requested_by="ops", request_id="ext-1"))  # by the template's step
    assert isinstance(reply, LeaseExtended) and reply.expires_at == first + timedelta(hours=1)
    retried = await h.send(ExtendLease(cluster_id=cid, requested_by="ops", request_id="ext-1"))
    assert retried == reply  # the same request again: extended once
    assert h.cluster(cid).expires_at == reply.expires_at and reply.version == h.cluster(cid).version
    too_far = await h.send(ExtendLease(cluster_id=cid, by_s=2 * HOUR))
    assert isinstance(too_far, Rejected) and "at most 1 h (the template's step)" in too_far.reason
    await h.clock.advance(HOUR + 60)  # past the first expiry: nothing happens
    assert _deletes(h) == []
    again = await h.send(ExtendLease(cluster_id=cid, by_s=HOUR))
    assert isinstance(again, LeaseExtended)
    past_max = await h.send(ExtendLease(cluster_id=cid, by_s=HOUR))
    assert isinstance(past_max, Rejected) and "(the template's max)" in past_max.reason
    await h.clock.advance(2 * HOUR)
    assert len(_deletes(h)) == 1


async def test_a_busy_cluster_is_deleted_when_its_job_ends() -> None:
    h = leased()
    cid = await _create(h)
    h.behaviour = lambda m: "hold"
    busy = await h.send(ConfigureCluster(cluster_id=cid, config={"a": 1}))
    assert isinstance(busy, Accepted)
    await h.settle()
    await h.clock.advance(HOUR + 1)
    assert _deletes(h) == []  # refused for now: busy with the configure
    h.behaviour = lambda m: "succeed"
    await h.release()
    await h.clock.advance(0)  # the end of the configure armed the lease again, due at once
    assert len(_deletes(h)) == 1
    await h.settle()
    assert h.cluster(cid).status == "deleted"


async def test_the_timer_is_rebuilt_from_the_log_after_a_restart() -> None:
    h = leased()
    cid = await _create(h)
    await h.clock.advance(HOUR / 2)
    await h.restart()
    assert h.planner.timers.armed("lease") == [("lease", "default", cid)]
    await h.clock.advance(HOUR / 2 + 1)
    assert len(_deletes(h)) == 1


async def test_only_the_owner_arms_the_timer() -> None:
    mine: set[str] = set()
    h = leased(ownership=OwnedWhere(lambda tenant, cluster_id: not mine or cluster_id in mine))
    await _create(h)
    mine.add("someone-else")
    await h.restart()
    assert h.planner.timers.armed("lease") == []
    await h.clock.advance(2 * HOUR)
    assert _deletes(h) == []


async def test_a_shard_gained_while_its_lease_is_renewed_late_arms_the_timer() -> None:
    late = False
    h = leased(ownership=OwnedWhere(lambda tenant, cluster_id: not late))
    cid = await _create(h)
    h.planner.timers.cancel_all()
    h.planner = h._planner()
    late = True  # the shard's lease is renewed late while the planner rebuilds it
    await h.planner.resume(lambda cluster_id: True)
    late = False
    assert h.planner.timers.armed("lease") == [("lease", "default", cid)]


async def test_the_request_may_shorten_the_lease_not_lengthen_it() -> None:
    h = leased()
    start = h.clock.now()
    cid = await _create(h, lease_s=600)
    assert h.cluster(cid).expires_at == start + timedelta(seconds=600)
    longer = await h.send(CreateCluster(name="long", template="hadoop-small", nodes=2, lease_s=2 * HOUR))
    assert isinstance(longer, Rejected) and longer.reason == (
        "the template's initial lease is 1 h, which a create may shorten, not lengthen; 2 h requested")
    forever = await h.send(CreateCluster(name="forever", template="hadoop-small", nodes=2, lease_s=0))
    assert isinstance(forever, Rejected) and forever.reason.endswith(f"; 0 requested, which expires {NO_LEASE_END}")


async def test_a_template_without_a_lease_keeps_clusters_forever() -> None:
    h = leased(initial=0, max_=0, step=0)
    cid = await _create(h)
    assert h.cluster(cid).expires_at is None
    assert "ClusterLeaseChanged" not in h.log.types(f"muster.evt.default.cluster.{cid}")
    reply = await h.send(ExtendLease(cluster_id=cid, by_s=HOUR))
    assert isinstance(reply, Rejected) and reply.reason == "the cluster expires never (no lease): nothing to extend"
    bad = leased(initial="2 weeks")
    refused = await bad.send(CreateCluster(name="x", template="hadoop-small", nodes=2))
    assert isinstance(refused, Rejected) and "administration.leaseduration.initial: '2 weeks' is not a duration" in refused.reason


def test_a_refused_extension_says_its_times_as_people_read_them() -> None:
    """They said `2026-11-28T13:00:00+00:00` where every other view says `2026-11-28 13:00:00 UTC`."""
    from datetime import UTC, datetime, timedelta

    from services.planner.domain.admission import Refused
    from services.planner.domain.leases import Lease, extended

    now = datetime(2026, 11, 28, 12, tzinfo=UTC)
    lease = Lease(now + timedelta(hours=1), now + timedelta(hours=2), 3600)
    with pytest.raises(Refused) as earlier:
        extended(lease, now, until=now + timedelta(minutes=30))
    assert str(earlier.value) == ("the lease already runs until 2026-11-28 13:00:00 UTC; 2026-11-28 12:30:00 UTC "
                                         "is not later")
    with pytest.raises(Refused) as past:
        extended(Lease(now + timedelta(hours=1), now + timedelta(hours=2), 0), now, until=now + timedelta(hours=3))
    assert "may not run past 2026-11-28 14:00:00 UTC (the template's max); 2026-11-28 15:00:00 UTC asked" in str(past.value)
