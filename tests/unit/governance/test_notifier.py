"""The notifier's rules on fakes (an in-memory log, a manual clock, a delivery that records):
which events notify whom, when, the retries with backoff each recorded, a lease warning
dropped when the lease moved, drift after a check, what a restart still owes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from contracts import subjects
from contracts.approvals import JobApprovalRequested
from contracts.catalog import Catalog, Service
from contracts.events import (
    ClusterLayoutChanged,
    ClusterLeaseChanged,
    ClusterRequested,
    JobFailed,
    JobNeedsAttention,
    JobRequested,
    JobRolledBack,
    JobSucceeded,
    ServiceStateObserved,
)
from contracts.governance import Subscription
from contracts.layout import NodeSpec
from muster.catalog.store import apply_catalog
from muster.ports.eventlog import Append
from muster.ports.memory import ManualClock, MemoryEventLog
from services.notifier.app import Notifier
from services.notifier.domain.notices import BACKOFF_S, slack

T0 = datetime(2026, 11, 28, 12, tzinfo=UTC)


class Deliver:
    def __init__(self, failures: int = 0, raises: int = 0) -> None:
        self.sent: list[tuple[str, str, dict[str, Any]]] = []
        self.failures, self.raises = failures, raises

    async def __call__(self, tenant: str, sub: Subscription, body: dict[str, Any], nid: str) -> tuple[bool, int | None, str]:
        json.dumps(body)  # what the real deliveries send: the body must be JSON as it is
        self.sent.append((sub.name, nid, body))
        if self.raises:
            self.raises -= 1
            raise ConnectionResetError("the receiver hung up")
        if self.failures:
            self.failures -= 1
            return False, 503, "HTTP 503"
        return True, 204, ""


def sub(name: str = "hook", **fields: Any) -> Subscription:
    return Subscription.model_validate({"name": name, "events": ["job_failed", "job_succeeded"], "subject": "muster.cb.a.x",
                                        **fields})


async def world(subs: list[Subscription], deliver: Deliver) -> tuple[MemoryEventLog, ManualClock, Notifier]:
    clock = ManualClock(T0)
    log = MemoryEventLog(clock)
    notifier = Notifier(log, deliver, clock, lambda tenant: subs if tenant == "a" else [])
    await notifier.resume()
    return log, clock, notifier


async def cluster(log: MemoryEventLog, name: str = "web", expires: datetime | None = None) -> None:
    subject = subjects.cluster_events("a", "c1")
    events: list[Any] = [ClusterRequested(tenant="a", cluster_id="c1", name=name, template="t", provider="sim", job_id="j0"),
                         ClusterLayoutChanged(cluster_id="c1", job_id="j0", nodes=[NodeSpec(id="n1", hardwaretype="s", imagetype="i",
                                                                                             services=["db"])])]
    if expires is not None:
        events.append(ClusterLeaseChanged(cluster_id="c1", expires_at=expires))
    await log.append(subject, [Append(e, msg_id=f"c{i}") for i, e in enumerate(events)])


async def job(log: MemoryEventLog, notifier: Notifier, end: Any, operation: str = "delete", job_id: str = "j1") -> None:
    subject = subjects.job_events("a", job_id)
    await log.append(subject, [Append(JobRequested(tenant="a", job_id=job_id, cluster_id="c1", operation=operation, request={},
                                                   requested_by="uma"), msg_id=f"{job_id}-r")])
    seqs = await log.append(subject, [Append(end, msg_id=f"{job_id}-end")])
    await notifier.on_job_event((await log.read(subject, start_seq=seqs[0]))[0])


async def test_a_jobs_end_notifies_each_subscription_that_wants_it_once() -> None:
    deliver = Deliver()
    log, clock, notifier = await world([sub("all"), sub("only-db", clusters=["db-*"]), sub("ok", events=["job_succeeded"])], deliver)
    await cluster(log)
    await job(log, notifier, JobFailed(job_id="j1", reason="node n1 did not start"))
    await notifier.on_job_event((await log.read(subjects.job_events("a", "j1")))[-1])  # the same event again: nothing new
    await clock.advance(0)
    await notifier.on_job_event((await log.read(subjects.job_events("a", "j1")))[-1])  # and once delivered: nothing again
    await clock.advance(0)
    assert [(name, body["kind"]) for name, _, body in deliver.sent] == [("all", "job_failed")]
    body = deliver.sent[0][2]
    assert body["cluster"] == "web" and body["requester"] == "uma" and "did not start" in body["text"]
    assert slack(body) == {"text": f"[muster · a] {body['text']}"}
    assert log.types(subjects.notification_events("a", "all")) == ["NotificationQueued", "NotificationAttempted"]


async def test_a_failed_delivery_is_retried_with_backoff_each_attempt_recorded() -> None:
    deliver = Deliver(failures=2)
    log, clock, notifier = await world([sub()], deliver)
    await cluster(log)
    await job(log, notifier, JobSucceeded(job_id="j1"))
    await clock.advance(0)
    await clock.advance(BACKOFF_S[0])
    assert len(deliver.sent) == 2  # the second attempt came after the first wait, not before
    await clock.advance(BACKOFF_S[1])
    attempts = [r.event for r in await log.read(subjects.notification_events("a", "hook")) if r.type == "NotificationAttempted"]
    assert [(a.attempt, a.ok, a.final) for a in attempts] == [(1, False, False), (2, False, False), (3, True, True)]
    assert attempts[0].next_at == T0 + timedelta(seconds=BACKOFF_S[0]) and attempts[0].status == 503


async def test_a_notifier_that_restarts_owes_what_it_had_not_delivered() -> None:
    deliver = Deliver(failures=1)
    log, clock, notifier = await world([sub()], deliver)
    await cluster(log)
    await job(log, notifier, JobSucceeded(job_id="j1"))
    await clock.advance(0)
    notifier.close()  # died after the first (failed) attempt
    again = Deliver()
    restarted = Notifier(log, again, clock, lambda tenant: [sub()])
    await restarted.resume()
    await clock.advance(BACKOFF_S[0])
    assert [nid for _, nid, _ in again.sent] == [deliver.sent[0][1]]


async def test_a_lease_warning_is_due_before_the_lease_ends_and_dropped_when_it_moved() -> None:
    deliver = Deliver()
    log, clock, notifier = await world([sub(events=["lease_expiring"], lease_warning_s=3600)], deliver)
    ends = T0 + timedelta(hours=3)
    await cluster(log, expires=ends)
    lease = (await log.read(subjects.cluster_events("a", "c1")))[-1]
    await notifier.on_lease_event(lease)
    await clock.advance(3600)
    assert deliver.sent == []
    await clock.advance(3600)
    assert [body["kind"] for _, _, body in deliver.sent] == ["lease_expiring"]
    # The sentence says the time as every other human-facing place does (`muster.times`); it
    # said `2026-...T...Z`. The field stays ISO 8601 for programs.
    warned = deliver.sent[0][2]
    assert warned["text"] == f"the lease of cluster web ends at {ends.strftime('%Y-%m-%d %H:%M:%S')} UTC", warned
    assert datetime.fromisoformat(warned["expires_at"]) == ends
    # A lease extended before its warning was due: the warning is dropped, recorded as such.
    await log.append(subjects.cluster_events("a", "c1"), [Append(ClusterLeaseChanged(cluster_id="c1", expires_at=ends + timedelta(hours=5)),
                                                                 msg_id="ext")])
    await notifier.on_lease_event((await log.read(subjects.cluster_events("a", "c1")))[-1])
    await log.append(subjects.cluster_events("a", "c1"), [Append(ClusterLeaseChanged(cluster_id="c1", expires_at=ends + timedelta(hours=9)),
                                                                 msg_id="ext2")])
    await clock.advance(5 * 3600)
    dropped = [r.event for r in await log.read(subjects.notification_events("a", "hook")) if r.type == "NotificationAttempted"]
    assert len(deliver.sent) == 1 and dropped[-1].final and "no longer true" in dropped[-1].error


async def test_a_check_that_found_drift_notifies_drift_found() -> None:
    deliver = Deliver()
    log, clock, notifier = await world([sub(events=["drift_found"])], deliver)
    await cluster(log)
    await log.append(subjects.cluster_events("a", "c1"), [Append(ServiceStateObserved(
        cluster_id="c1", job_id="j1", task_id="n1.status.db", node_id="n1", service="db", state="stopped"), msg_id="obs")])
    await job(log, notifier, JobSucceeded(job_id="j1"), operation="check")
    await clock.advance(0)
    assert [body["kind"] for _, _, body in deliver.sent] == ["drift_found"]
    assert "db on n1 stopped (should be running)" in deliver.sent[0][2]["text"]


async def test_drift_found_says_what_the_repair_does_with_the_catalog_of_its_moment() -> None:
    # `app` failed while `db`, which it needs running, is down too: a repair starts it after db
    # (the tracker's drift says so); the notification said "reinstall" (no catalog).
    deliver = Deliver()
    log, clock, notifier = await world([sub(events=["drift_found"])], deliver)
    services = {"db": Service(name="db"), "app": Service.model_validate({"name": "app", "dependencies": {"runtime": {"requires": ["db"]}}})}
    await apply_catalog(log, "a", Catalog(services=services))
    subject = subjects.cluster_events("a", "c1")
    await log.append(subject, [Append(e, msg_id=f"c{i}") for i, e in enumerate([
        ClusterRequested(tenant="a", cluster_id="c1", name="web", template="t", provider="sim", job_id="j0"),
        ClusterLayoutChanged(cluster_id="c1", job_id="j0", nodes=[NodeSpec(id="n1", hardwaretype="s", imagetype="i",
                                                                           services=["db", "app"])]),
        ServiceStateObserved(cluster_id="c1", job_id="j1", task_id="n1.status.db", node_id="n1", service="db", state="stopped"),
        ServiceStateObserved(cluster_id="c1", job_id="j1", task_id="n1.status.app", node_id="n1", service="app", state="failed"),
    ])])
    await job(log, notifier, JobSucceeded(job_id="j1"), operation="check")
    await clock.advance(0)
    assert "app on n1 failed (should be running; a repair starts it after db)" in deliver.sent[0][2]["text"]


async def test_a_job_waiting_for_approval_notifies_needs_approval_in_json_and_a_delivery_that_raises_is_retried() -> None:
    deliver = Deliver(raises=1)
    log, clock, notifier = await world([sub(events=["needs_approval"])], deliver)
    await cluster(log)
    expires = T0 + timedelta(hours=1)
    await job(log, notifier, JobApprovalRequested(job_id="j1", rules=["deletes"], expires_at=expires, digest="d",
                                                        cluster_version=1))
    await clock.advance(0)
    await clock.advance(BACKOFF_S[0])
    assert [body["kind"] for _, _, body in deliver.sent] == ["needs_approval", "needs_approval"]
    body = deliver.sent[-1][2]
    assert body["expires_at"] == expires.isoformat().replace("+00:00", "Z") and body["rules"] == ["deletes"]
    assert f"waits for approval until {expires.strftime('%Y-%m-%d %H:%M:%S')} UTC" in body["text"]
    attempts = [r.event for r in await log.read(subjects.notification_events("a", "hook")) if r.type == "NotificationAttempted"]
    assert [(a.ok, a.final) for a in attempts] == [(False, False), (True, True)]
    assert "ConnectionResetError: the receiver hung up" in attempts[0].error


async def test_a_job_that_was_rolled_back_is_told_in_the_states_own_words() -> None:
    """`state` is the job's state as the tracker and `muster status` name it, so a receiver can
    match on it; the text reads as a sentence ('ended rolledback' before)."""
    deliver = Deliver()
    log, clock, notifier = await world([sub(events=["job_failed", "needs_approval"])], deliver)
    await cluster(log)
    await job(log, notifier, JobRolledBack(job_id="j1", reason="task n1.start.db failed 3 times"))
    await job(log, notifier, JobNeedsAttention(job_id="j2", reason="the rollback failed"), job_id="j2")
    await job(log, notifier, JobApprovalRequested(job_id="j3", rules=["big"], expires_at=T0 + timedelta(hours=1), digest="d",
                                                  cluster_version=1), job_id="j3")
    await clock.advance(0)
    bodies = [body for _, _, body in deliver.sent]
    assert [b["state"] for b in bodies] == ["rolled_back", "needs_attention", "waiting_for_approval"]
    assert bodies[0]["text"] == "job j1 (delete of web) was rolled back: task n1.start.db failed 3 times"
    assert bodies[1]["text"] == "job j2 (delete of web) needs an administrator's attention: the rollback failed"


class Receiver(Deliver):
    """Down (503) until the test brings it back."""

    def __init__(self) -> None:
        super().__init__()
        self.up = False

    async def __call__(self, tenant: str, sub: Subscription, body: dict[str, Any], nid: str) -> tuple[bool, int | None, str]:
        self.sent.append((sub.name, nid, body))
        return (True, 204, "") if self.up else (False, 503, "HTTP 503")


async def test_a_receiver_back_up_gets_what_it_missed_at_once_oldest_first() -> None:
    """Each failed notification waits out its own backoff (1 s, 2 s, 5 s ... 15 min): without
    catching up, the receiver that is back gets its backlog over the next minutes, newest
    first when the newest failed fewer times."""
    receiver = Receiver()
    log, clock, notifier = await world([sub()], receiver)
    await cluster(log)
    await job(log, notifier, JobFailed(job_id="j1", reason="r"))
    await clock.advance(0)
    await clock.advance(BACKOFF_S[0])
    await clock.advance(BACKOFF_S[1])  # j1 failed 3 times: its next try is BACKOFF_S[2] away
    await job(log, notifier, JobSucceeded(job_id="j2"), job_id="j2")
    await job(log, notifier, JobSucceeded(job_id="j3"), job_id="j3")
    await clock.advance(0)  # j2 and j3 failed once each
    receiver.up = True
    await clock.advance(BACKOFF_S[0])  # j2's and j3's second tries come first, and the receiver answers
    delivered = [body["job_id"] for _, _, body in receiver.sent[-3:]]
    assert delivered == ["j2", "j1", "j3"] and notifier.owed == {} and notifier.timers == {}
    seqs = {body["job_id"]: body["seq"] for _, _, body in receiver.sent}  # what a receiver orders by
    assert seqs["j1"] < seqs["j2"] < seqs["j3"]
    attempts = [r.event for r in await log.read(subjects.notification_events("a", "hook")) if r.type == "NotificationAttempted"]
    assert sum(a.ok for a in attempts) == 3 and all(a.final for a in attempts if a.ok)


async def test_a_test_notification_is_one_attempt_whatever_its_outcome() -> None:
    """`notify test` answers with the outcome; a failed test is not tried again behind the
    person's back (for up to 20 minutes, after they fixed the receiver and tested again)."""
    deliver = Deliver(failures=1)
    log, clock, notifier = await world([sub()], deliver)
    outcome = await notifier.queue_test("a", sub(), "hook-test-1")
    assert not outcome.ok and outcome.final and outcome.next_at is None
    await clock.advance(3600)
    assert [nid for _, nid, _ in deliver.sent] == ["hook-test-1"] and notifier.owed == {}


async def test_an_attempt_the_log_did_not_take_is_made_again_and_recorded() -> None:
    """Session 32: the log away when an attempt's outcome was recorded (a partition, an
    election): its timer was spent and nothing armed another, so the notification was neither
    delivered again nor given up on until a restart."""
    deliver = Deliver(failures=1)
    log, clock, notifier = await world([sub()], deliver)
    await cluster(log)
    await job(log, notifier, JobSucceeded(job_id="j1"))
    log.inject(lambda subject, items: any(getattr(i.event, "type", "") == "NotificationAttempted" for i in items), TimeoutError("nats: timeout"))
    await clock.advance(0)  # attempt 1 failed at the receiver, and the log did not take it
    await clock.advance(5)  # made again: the attempt the log has (the one it did not take is as if never made)
    attempts = [r.event for r in await log.read(subjects.notification_events("a", "hook")) if r.type == "NotificationAttempted"]
    assert [(a.attempt, a.ok, a.final) for a in attempts] == [(1, True, True)]
    assert len(deliver.sent) == 2 and len({nid for _, nid, _ in deliver.sent}) == 1  # at least once, one delivery id
    assert notifier.owed == {} and notifier.timers == {}
