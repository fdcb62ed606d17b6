"""A webhook subscription is checked by the notifier before it is stored (the secrets it names,
where it sends): refused with the notifier's problems, or written with a warning when no notifier
answered; a bus subscription needs no check. A listing tells each subscription's last delivery."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from contracts import subjects
from contracts.governance import GovernanceAnswer, GovernanceRequest
from contracts.notifications import NotificationAttempted, NotificationQueued
from muster.ports.eventlog import Append
from muster.ports.memory import ManualClock, MemoryEventLog
from services.governance.domain.deliveries import said
from services.governance.writes import GovernanceWrites

WEBHOOK = {"url": "https://hooks.example/x", "secret": "secret://nope"}
HOOK: dict[str, Any] = {"name": "ops", "events": ["job_failed"], "webhook": WEBHOOK}
BUS = {"name": "bus", "events": ["job_failed"], "subject": "muster.cb.a.ops"}


class Vet:
    def __init__(self, answer: GovernanceAnswer | str) -> None:
        self.answer = answer
        self.asked: list[tuple[str, str, list[dict[str, Any]]]] = []

    async def __call__(self, tenant: str, principal: str, entities: list[dict[str, Any]]) -> GovernanceAnswer | str:
        self.asked.append((tenant, principal, entities))
        return self.answer


async def put(writes: GovernanceWrites, *entities: dict[str, Any], verb: str = "put") -> GovernanceAnswer:
    request = GovernanceRequest(kind="subscription", entities=list(entities), requested_by="uma")
    return await writes.answer("a", "anonymous", verb, request.model_dump_json().encode())


async def test_a_webhook_the_notifier_could_not_deliver_is_refused_and_nothing_written() -> None:
    log = MemoryEventLog()
    problem = "subscription 'ops': webhook.secret: secret 'nope' is not in the notifier's secrets file"
    vet = Vet(GovernanceAnswer(ok=False, reason="1 problem", problems=[problem], code="invalid"))
    answer = await put(GovernanceWrites(log, vet=vet), HOOK, BUS)
    assert not answer.ok and answer.code == "invalid" and answer.problems == [problem], answer
    assert log.records == []
    assert vet.asked == [("a", "anonymous", [{**HOOK, "webhook": {**WEBHOOK, "format": "muster"}, "subject": None,
                                               "clusters": [], "lease_warning_s": 3600.0}])]  # the webhook alone


async def test_without_a_notifier_to_ask_it_is_written_with_a_warning() -> None:
    log = MemoryEventLog()
    answer = await put(GovernanceWrites(log, vet=Vet("no notifier is running")), HOOK)
    assert answer.ok and [i["name"] for i in answer.items] == ["ops"], answer
    assert answer.warnings == ["subscription 'ops' stored unchecked: no notifier is running; whether the notifier has the "
                               "secrets named and may send to the webhook is told at the first delivery (`muster notify test "
                               "NAME` once one runs)"]
    warned = await put(GovernanceWrites(MemoryEventLog(), vet=Vet(GovernanceAnswer(ok=True, warnings=["w"]))), HOOK)
    assert warned.ok and warned.warnings == ["w"]


async def test_a_bus_subscription_is_not_sent_to_the_notifier() -> None:
    vet = Vet("no notifier is running")
    answer = await put(GovernanceWrites(MemoryEventLog(), vet=vet), BUS)
    assert answer.ok and answer.warnings == [] and vet.asked == []


async def test_a_listing_tells_each_subscriptions_last_delivery() -> None:
    t0 = datetime(2026, 11, 30, 12, tzinfo=UTC)
    log = MemoryEventLog(ManualClock(t0))
    writes = GovernanceWrites(log)
    assert (await put(writes, HOOK, BUS)).ok
    queued = NotificationQueued(id="ops-7-job_failed", subscription="ops", kind="job_failed", cause_seq=7, due_at=t0, body={})
    failed = NotificationAttempted(id="ops-7-job_failed", attempt=1, ok=False, status=503, error="HTTP 503 from https://hooks.example/x",
                                   final=False, next_at=t0 + timedelta(seconds=1))
    await log.append(subjects.notification_events("a", "ops"), [Append(queued, msg_id="q"), Append(failed, msg_id="f")])
    listed = await put(writes, verb="list")
    by_name = {i["name"]: i for i in listed.items}
    assert by_name["bus"]["delivery"] is None and said(None) == "-"
    delivery = by_name["ops"]["delivery"]
    assert delivery["state"] == "failing" and delivery["status"] == 503 and delivery["attempt"] == 1, delivery
    # times as every other human view says them (they were ISO 8601 cut at the seconds, no zone)
    assert said(delivery) == ("failing at 2026-11-30 12:00:00 UTC: HTTP 503 from https://hooks.example/x (attempt 1; next at "
                              "2026-11-30 12:00:01 UTC)")
