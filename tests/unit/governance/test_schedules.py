"""Schedules' ticks, and the scheduler on an in-memory log, a manual clock and a fake sender:
one request per tick, the same request_id when sent again, the missed-ticks policy; a schedule
whose cluster the log says is deleted ends, and one made on such a cluster is refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from contracts import subjects
from contracts.commands import LeaseExtended
from contracts.events import ClusterLayoutChanged, ClusterLeaseChanged, ClusterRequested, ClusterStatusChanged
from contracts.governance import GovernancePut, GovernanceRequest, Schedule, ScheduleAnswered, ran_text
from contracts.layout import NodeSpec
from contracts.records import Recorded
from muster.ports.eventlog import Append
from muster.ports.memory import ManualClock, MemoryEventLog
from services.governance.domain.entities import fold
from services.governance.domain.schedules import ScheduleError, check, cluster_gone, due, next_tick, request_id
from services.governance.entrypoint import NatsSender
from services.governance.scheduler import Answer, Scheduler
from services.governance.writes import GovernanceWrites
from services.tracker.governance import listing, schedule_runs

T0 = datetime(2026, 11, 28, 0, 0, tzinfo=UTC)


def schedule(**fields: Any) -> Schedule:
    return Schedule.model_validate({"name": "n", "verb": "check", "command": {"type": "CheckCluster", "cluster_id": "c1"},
                                    "owner": "uma", **({"cron": "0 3 * * *"} | fields)})


def test_cron_ticks_follow_the_schedules_time_zone() -> None:
    paris = schedule(timezone="Europe/Paris")
    assert next_tick(paris, T0, T0) == datetime(2026, 11, 28, 2, 0, tzinfo=UTC)  # 03:00 in Paris, winter
    with pytest.raises(ScheduleError, match="time zone"):
        check(schedule(timezone="Mars/Olympus"))
    with pytest.raises(ScheduleError, match="cron"):
        check(schedule(cron="61 * * * *"))


def test_missed_ticks_run_once_late_or_not_at_all() -> None:
    nightly = schedule()
    monday = datetime(2026, 11, 30, 9, tzinfo=UTC)
    once = due(nightly, T0 - timedelta(hours=21), T0 - timedelta(days=10), monday)  # last ran Friday 03:00
    assert once.tick == datetime(2026, 11, 30, 3, tzinfo=UTC) and once.skipped == 2 and once.late_s == 6 * 3600
    skip = due(schedule(missed="skip"), T0 - timedelta(hours=21), T0 - timedelta(days=10), monday)
    assert skip.tick is None and skip.next_at == datetime(2026, 12, 1, 3, tzinfo=UTC)
    assert due(schedule(paused=True), T0 - timedelta(hours=21), T0 - timedelta(days=10), monday).tick is None


class Sender:
    def __init__(self, answers: list[Answer] | None = None) -> None:
        self.sent: list[tuple[str, str, str, dict[str, Any]]] = []
        self.answers = answers or []

    async def __call__(self, tenant: str, principal: str, verb: str, body: dict[str, Any]) -> Answer:
        self.sent.append((tenant, principal, verb, body))
        return self.answers.pop(0) if self.answers else Answer(f"job-{body['request_id']}")


async def scheduler_on(log: MemoryEventLog, clock: ManualClock, sender: Sender, name: str = "s1") -> Scheduler:
    s = Scheduler(log, sender, clock, name)
    s.start({"a": fold(await log.read(subjects.governance_filter("a", "schedule")))})
    return s


async def put(log: MemoryEventLog, **fields: Any) -> None:
    entity = schedule(**fields).model_dump(mode="json")
    subject = subjects.governance_events("a", "schedule", "n")
    await log.append(subject, [Append(GovernancePut(kind="schedule", name="n", entity=entity, version=1, by="uma"),
                                      msg_id="put", time=T0)])


async def follow(log: MemoryEventLog, s: Scheduler) -> None:
    """What the mirror does: fold the schedule's subject and tell the scheduler."""
    entries = fold(await log.read(subjects.governance_filter("a", "schedule")))
    await s.on_change("a", "schedule", "n", entries.get(("schedule", "n")))


async def test_each_tick_sends_one_request_as_the_owner_and_records_the_job() -> None:
    log, clock, sender = MemoryEventLog(), ManualClock(T0), Sender()
    await put(log, cron=None, every_s=10)
    s = await scheduler_on(log, clock, sender)
    await clock.advance(10)
    await follow(log, s)
    await clock.advance(10)
    await follow(log, s)
    assert [(p, v, b["request_id"], b["requested_by"]) for _, p, v, b in sender.sent] == [
        ("uma", "check", request_id("n", T0 + timedelta(seconds=10)), "uma"),
        ("uma", "check", request_id("n", T0 + timedelta(seconds=20)), "uma")]
    types = log.types(subjects.governance_filter("a", "schedule"))
    assert types == ["GovernancePut", "ScheduleFired", "ScheduleAnswered", "ScheduleFired", "ScheduleAnswered"]
    runs = fold(await log.read(subjects.governance_filter("a", "schedule")))[("schedule", "n")].runs
    assert [r["job_id"] for r in runs] == [f"job-{b['request_id']}" for *_, b in sender.sent]


async def test_two_schedulers_take_each_tick_once() -> None:
    log, clock = MemoryEventLog(), ManualClock(T0)
    await put(log, cron=None, every_s=10)
    one, two = Sender(), Sender()
    s1, s2 = await scheduler_on(log, clock, one, "s1"), await scheduler_on(log, clock, two, "s2")
    await clock.advance(10)
    assert len(one.sent) + len(two.sent) == 1
    assert log.types(subjects.governance_filter("a", "schedule")).count("ScheduleFired") == 1
    assert s1 is not s2


async def test_a_tick_taken_and_not_answered_is_sent_again_with_the_same_request_id_after_a_restart() -> None:
    log, clock = MemoryEventLog(), ManualClock(T0)
    await put(log, cron=None, every_s=10)
    down = Sender([Answer(None, "no planner answered", again=True)] * 20)
    first = await scheduler_on(log, clock, down, "s1")
    await clock.advance(10)  # taken; the planner is away, so the request waits to go again
    first.close()
    later = ManualClock(T0 + timedelta(seconds=12))
    up = Sender()
    await scheduler_on(log, later, up, "s2")  # a new scheduler: the first one died
    await later.advance(0)
    assert [b["request_id"] for *_, b in up.sent] == [down.sent[0][3]["request_id"]]
    runs = fold(await log.read(subjects.governance_filter("a", "schedule")))[("schedule", "n")].runs
    assert [r["job_id"] for r in runs] == [f"job-{down.sent[0][3]['request_id']}"]
    assert log.types(subjects.governance_filter("a", "schedule")).count("ScheduleFired") == 1


async def test_while_a_ticks_request_waits_for_a_planner_no_later_tick_is_taken_and_those_missed_run_once() -> None:
    log, clock = MemoryEventLog(), ManualClock(T0)
    await put(log, cron=None, every_s=10)
    away = Sender([Answer(None, "no planner answered", again=True)] * 5)  # sent at 10, 11, 13, 18 and 28 s; answered at 58 s
    s = await scheduler_on(log, clock, away)
    await clock.advance(10)
    await follow(log, s)  # the mirror: the tick @10 is taken and not answered
    await clock.advance(48)
    await follow(log, s)  # @10 answered at 58 s: the ticks @20..@50 passed meanwhile, the latest runs once, late
    await clock.advance(0)
    fired = [r.event for r in await log.read(subjects.governance_filter("a", "schedule")) if r.type == "ScheduleFired"]
    assert [(f.tick - T0).total_seconds() for f in fired] == [10, 50] and (fired[1].skipped, fired[1].late_s) == (3, 8)
    assert [b["request_id"] for *_, b in away.sent] == [fired[0].request_id] * 6 + [fired[1].request_id]


async def test_a_rejected_tick_is_recorded_with_the_reason() -> None:
    log, clock = MemoryEventLog(), ManualClock(T0)
    await put(log, cron=None, every_s=10)
    await scheduler_on(log, clock, Sender([Answer(None, "check refused: uma has no execute permission")]))
    await clock.advance(10)
    runs = fold(await log.read(subjects.governance_filter("a", "schedule")))[("schedule", "n")].runs
    assert runs[0]["job_id"] is None and "no execute permission" in runs[0]["rejected"]


async def test_a_tick_that_makes_no_job_records_what_it_did() -> None:
    """A scheduled `cluster extend-lease` is answered `LeaseExtended`, not a job: done, not refused."""
    log, clock = MemoryEventLog(), ManualClock(T0)
    await put(log, cron=None, every_s=10)
    await scheduler_on(log, clock, Sender([Answer(None, done="lease extended: expires at 2026-11-28T01:00:00+00:00")]))
    await clock.advance(10)
    (run,) = fold(await log.read(subjects.governance_filter("a", "schedule")))[("schedule", "n")].runs
    assert run["rejected"] == "" and ran_text(run["job_id"], run["rejected"], run["done"]) == (
        "lease extended: expires at 2026-11-28T01:00:00+00:00")


async def test_the_bus_sender_takes_an_extended_lease_as_done() -> None:
    class Reply:
        data = LeaseExtended(cluster_id="c1", expires_at=T0, version=3).model_dump_json().encode()

    class Bus:
        async def request(self, *_: Any, **__: Any) -> Reply:
            return Reply()

    answer = await NatsSender(Bus(), timeout=1)("a", "uma", "extend-lease", {})  # type: ignore[arg-type]
    assert answer == Answer(None, "", False, "lease extended: expires at 2026-11-28 00:00:00 UTC")  # as people read times


# -- a schedule whose cluster is deleted ----------------------------------------------------------


def cluster_history(*statuses: str) -> list[Recorded]:
    events: list[Any] = [ClusterRequested(tenant="a", cluster_id="c1", name="web", template="t", provider="sim", job_id="j0")]
    events += [ClusterStatusChanged(cluster_id="c1", status=s, job_id=f"j{i}") for i, s in enumerate(statuses, 1)]  # type: ignore[arg-type]
    return [Recorded(seq=i, subject=subjects.cluster_events("a", "c1"), time=T0, event=e) for i, e in enumerate(events, 1)]


def test_a_schedule_ends_once_the_log_says_its_cluster_was_deleted_and_not_before() -> None:
    assert cluster_gone(cluster_history("active")) == ""
    assert cluster_gone(cluster_history("active", "deleting")) == ""  # its delete may still fail
    assert cluster_gone(cluster_history("active", "deleting", "deleted")) == "cluster web was deleted (job j3)"


async def delete_cluster(log: MemoryEventLog, *statuses: str) -> None:
    for r in cluster_history(*statuses):
        await log.append(r.subject, [Append(r.event, msg_id=f"c1-{r.seq}", time=T0)])


async def test_a_tick_refused_because_its_cluster_was_deleted_ends_the_schedule_for_good() -> None:
    log, clock = MemoryEventLog(), ManualClock(T0)
    await put(log, cron=None, every_s=10)
    await delete_cluster(log, "active", "deleted")
    sender = Sender([Answer(None, "cluster 'c1' is deleted")] * 5)
    s = await scheduler_on(log, clock, sender)
    await clock.advance(10)
    await follow(log, s)
    await clock.advance(60)
    assert len(sender.sent) == 1, "a schedule whose cluster is deleted fired again"
    entry = fold(await log.read(subjects.governance_filter("a", "schedule")))[("schedule", "n")]
    assert entry.ended == "cluster web was deleted (job j2)" and entry.ended_at is not None
    assert entry.to_json()["ended"] == entry.ended and s.next_at("a", "n") is None
    # A restarted scheduler reads the end from the log: it arms nothing for it.
    s.close()
    again = await scheduler_on(log, clock, sender, "s2")
    await clock.advance(60)
    assert len(sender.sent) == 1 and again.timers == {}
    types = log.types(subjects.governance_filter("a", "schedule"))
    assert types == ["GovernancePut", "ScheduleFired", "ScheduleAnswered"]


async def test_a_schedule_whose_cluster_was_deleted_is_listed_as_ended_before_its_next_tick() -> None:
    """Walk of session 24: deleted, a schedule's cluster left the schedule listed with its next
    run (`muster schedule list`, HTTP, the console) until its first tick was refused."""
    log = MemoryEventLog()
    writes = GovernanceWrites(log)
    await put(log, cron=None, every_s=10)

    async def listed() -> dict[str, Any]:
        answer = await writes.answer("a", "anonymous", "list", GovernanceRequest(kind="schedule", requested_by="uma").model_dump_json().encode())
        assert answer.ok, answer
        [item] = answer.items
        return item

    await delete_cluster(log, "active", "deleting")
    assert (await listed())["ended"] == ""  # its delete may still fail
    await log.append(subjects.cluster_events("a", "c1"), [Append(ClusterStatusChanged(cluster_id="c1", status="deleted", job_id="j2"),
                                                                 msg_id="c1-deleted", time=T0)])
    item = await listed()
    assert (item["ended"], item["ended_at"]) == ("cluster web was deleted (job j2)", None)  # (recorded at its next tick)
    assert item["runs"] == []
    [shown] = await listing(log, "a", "schedule")  # GET /v1/governance/schedules, the console's governance page
    assert (shown["ended"], shown["next_at"]) == ("cluster web was deleted (job j2)", None)


async def test_a_tick_refused_for_another_reason_leaves_the_schedule_running() -> None:
    log, clock = MemoryEventLog(), ManualClock(T0)
    await put(log, cron=None, every_s=10)
    await delete_cluster(log, "active", "deleting")  # refused as busy while its delete runs
    sender = Sender([Answer(None, "check refused: uma has no execute permission")] * 5)
    s = await scheduler_on(log, clock, sender)
    for _ in range(2):
        await clock.advance(10)
        await follow(log, s)
    entry = fold(await log.read(subjects.governance_filter("a", "schedule")))[("schedule", "n")]
    assert len(sender.sent) == 2 and entry.ended == "" and [r["rejected"] for r in entry.runs] == [
        "check refused: uma has no execute permission"] * 2


def test_an_ended_schedule_stays_ended_when_paused_or_retimed_and_runs_again_with_another_cluster() -> None:
    subject = subjects.governance_events("a", "schedule", "n")
    entity = schedule().model_dump(mode="json")

    def at(seq: int, event: Any) -> Recorded:
        return Recorded(seq=seq, subject=subject, time=T0 + timedelta(seconds=seq), event=event)

    def put_(version: int, **fields: Any) -> GovernancePut:
        return GovernancePut(kind="schedule", name="n", entity={**entity, **fields}, version=version, by="uma")

    ended = ScheduleAnswered(name="n", tick=T0, rejected="cluster 'c1' is deleted", ended="cluster web was deleted (job j2)")
    history = [at(1, put_(1)), at(2, ended)]
    assert fold([*history, at(3, put_(2, paused=True))])[("schedule", "n")].ended == ended.ended
    assert fold([*history, at(3, put_(2, cron="0 4 * * *"))])[("schedule", "n")].ended == ended.ended
    other = {"type": "CheckCluster", "cluster_id": "c2"}
    assert fold([*history, at(3, put_(2, command=other))])[("schedule", "n")].ended == ""


async def test_a_schedule_is_refused_on_a_cluster_the_log_does_not_have_or_has_deleted() -> None:
    log = MemoryEventLog()
    writes = GovernanceWrites(log)

    async def create(name: str, cluster_id: str, **fields: Any) -> Any:
        entity = {**schedule(name=name).model_dump(mode="json"), "command": {"type": "CheckCluster", "cluster_id": cluster_id},
                  **fields}
        request = GovernanceRequest(kind="schedule", entities=[entity], requested_by="uma")
        return await writes.answer("a", "anonymous", "put", request.model_dump_json().encode())

    nowhere = await create("nowhere", "c9")
    assert not nowhere.ok and nowhere.problems == [
        "schedule 'nowhere': there is no cluster 'c9' in tenant 'a': its operation could never run"]
    await delete_cluster(log, "active")
    assert (await create("nightly", "c1")).ok
    await delete_cluster(log, "deleting", "deleted")
    late = await create("late", "c1")
    assert not late.ok and late.code == "invalid" and late.problems == [
        "schedule 'late': cluster web was deleted (job j2): its operation could never run"], late
    # The schedule made before keeps its operation: it may still be paused (its next tick ends it).
    assert (await create("nightly", "c1", paused=True)).ok


async def test_a_lease_extension_is_refused_on_a_cluster_without_a_lease() -> None:
    """Walk of session 24: `schedule create weekly --cron '0 6 * * MON' -- cluster extend-lease c1
    --add 7d` on a cluster that expires never was written, and every tick would be refused (`the
    cluster expires never (no lease): nothing to extend`): a lease is set at create only."""
    log = MemoryEventLog()
    writes = GovernanceWrites(log)

    async def create(name: str) -> Any:
        entity = {**schedule(name=name).model_dump(mode="json"), "verb": "extend-lease",
                  "command": {"type": "ExtendLease", "cluster_id": "c1", "by_s": 7 * 86400}}
        request = GovernanceRequest(kind="schedule", entities=[entity], requested_by="uma")
        return await writes.answer("a", "anonymous", "put", request.model_dump_json().encode())

    await delete_cluster(log, "active")
    never = await create("weekly")
    assert not never.ok and never.code == "invalid" and never.problems == [
        "schedule 'weekly': cluster web has no lease (it expires never): its operation could never run"], never
    await log.append(subjects.cluster_events("a", "c1"), [Append(
        ClusterLeaseChanged(cluster_id="c1", expires_at=T0 + timedelta(days=1), max_at=None, step_s=0), msg_id="lease", time=T0)])
    assert (await create("weekly")).ok


async def test_an_expand_or_shrink_to_a_size_the_cluster_has_passed_is_refused_naming_both_sizes() -> None:
    """Walk of an earlier session: a schedule expanding a 3-node cluster to 2 was written, then
    every tick was refused (`expand needs more than the cluster's 3 nodes; 2 requested`) and
    recorded. Refused at creation, naming the target and the cluster's size now."""
    log = MemoryEventLog()
    writes = GovernanceWrites(log)

    async def create(name: str, verb: str, kind: str, nodes: int) -> Any:
        entity = {**schedule(name=name).model_dump(mode="json"), "verb": verb,
                  "command": {"type": kind, "cluster_id": "c1", "nodes": nodes}}
        request = GovernanceRequest(kind="schedule", entities=[entity], requested_by="uma")
        return await writes.answer("a", "anonymous", "put", request.model_dump_json().encode())

    await delete_cluster(log, "active")
    three = [NodeSpec(id=f"n{i}", hardwaretype="small", imagetype="debian", services=[]) for i in range(3)]
    await log.append(subjects.cluster_events("a", "c1"), [Append(ClusterLayoutChanged(cluster_id="c1", job_id="j1", nodes=three),
                                                                 msg_id="layout", time=T0)])
    for nodes in (2, 3):
        below = await create("grow", "expand", "ExpandCluster", nodes)
        assert not below.ok and below.code == "invalid" and below.problems == [
            f"schedule 'grow': it expands cluster web to {nodes} nodes and the cluster has 3: a tick is refused while the "
            f"cluster has {nodes} or more (an expand needs more nodes than the cluster has); give more than 3"], below
    above = await create("shrink", "shrink", "ShrinkCluster", 4)
    assert not above.ok and above.problems == [
        "schedule 'shrink': it shrinks cluster web to 4 nodes and the cluster has 3: a tick is refused while the "
        "cluster has 4 or fewer (a shrink needs fewer nodes than the cluster has); give fewer than 3"], above
    assert (await create("grow", "expand", "ExpandCluster", 4)).ok and (await create("shrink", "shrink", "ShrinkCluster", 2)).ok


async def put_version(log: MemoryEventLog, version: int, at: datetime, **fields: Any) -> None:
    entity = schedule(**fields).model_dump(mode="json")
    subject = subjects.governance_events("a", "schedule", "n")
    await log.append(subject, [Append(GovernancePut(kind="schedule", name="n", entity=entity, version=version, by="uma"),
                                      msg_id=f"put-{version}", time=at)])


async def test_a_resumed_schedule_does_not_run_the_ticks_that_fell_while_it_was_paused() -> None:
    """Session 32: resumed, a schedule ran at once, late, the latest tick of its pause (`--missed
    once`, the default): a `cluster restart` paused through an incident ran at its resume."""
    log, clock, sender = MemoryEventLog(), ManualClock(T0), Sender()
    every = {"cron": None, "every_s": 10}
    await put(log, **every)
    s = await scheduler_on(log, clock, sender)
    await clock.advance(10)  # @10 runs
    await follow(log, s)
    await clock.advance(5)
    await put_version(log, 2, clock.now(), paused=True, **every)
    await follow(log, s)
    await clock.advance(30)  # @20, @30, @40 fall while it is paused
    await put_version(log, 3, clock.now(), **every)  # resumed @45
    await follow(log, s)
    await clock.advance(0)
    assert len(sender.sent) == 1, "a tick of the pause ran at the resume"
    assert s.next_at("a", "n") == T0 + timedelta(seconds=50)
    item = fold(await log.read(subjects.governance_filter("a", "schedule")))[("schedule", "n")].to_json()
    assert schedule_runs(item, clock.now())["next_at"] == (T0 + timedelta(seconds=50)).isoformat()  # GET, the console
    await clock.advance(5)
    await follow(log, s)
    fired = [r.event for r in await log.read(subjects.governance_filter("a", "schedule")) if r.type == "ScheduleFired"]
    assert [((f.tick - T0).total_seconds(), f.late_s, f.skipped) for f in fired] == [(10, 0, 0), (50, 0, 0)]


def test_a_schedule_given_another_time_counts_its_ticks_from_then() -> None:
    """Retimed at 10:00 from 03:00 to 09:00, a nightly schedule's next run is tomorrow 09:00, not
    at once (its 09:00 of today fell before it was asked for); missed ticks still run once after it."""
    subject = subjects.governance_events("a", "schedule", "n")
    entity = schedule().model_dump(mode="json")
    day = datetime(2026, 11, 30, tzinfo=UTC)

    def at(seq: int, when: datetime, event: Any) -> Recorded:
        return Recorded(seq=seq, subject=subject, time=when, event=event)

    history = [at(1, day - timedelta(days=3), GovernancePut(kind="schedule", name="n", entity=entity, version=1, by="uma")),
               at(2, day + timedelta(hours=10), GovernancePut(kind="schedule", name="n", version=2, by="uma",
                                                             entity={**entity, "cron": "0 9 * * *"}))]
    entry = fold(history)[("schedule", "n")]
    assert entry.counts_from == day + timedelta(hours=10)
    now = day + timedelta(hours=10, minutes=1)
    retimed = Schedule.model_validate(entry.entity)
    assert due(retimed, day + timedelta(hours=3), entry.created_at, now, entry.counts_from) == (
        due(retimed, None, now, now))  # as if made at 10:00
    assert due(retimed, day + timedelta(hours=3), entry.created_at, now, entry.counts_from).next_at == day + timedelta(days=1, hours=9)
    two_days_on = day + timedelta(days=2, hours=12)  # no scheduler ran since: the latest missed tick runs once
    assert due(retimed, None, entry.created_at, two_days_on, entry.counts_from).tick == day + timedelta(days=2, hours=9)
    # A pause, or a change of what is only shown, keeps what the ticks count from.
    paused = fold([*history, at(3, day + timedelta(hours=11), GovernancePut(
        kind="schedule", name="n", version=3, by="uma", entity={**entity, "cron": "0 9 * * *", "paused": True}))])
    assert paused[("schedule", "n")].counts_from == day + timedelta(hours=10)
    missed = fold([*history, at(3, day + timedelta(hours=11), GovernancePut(
        kind="schedule", name="n", version=3, by="uma", entity={**entity, "cron": "0 9 * * *", "missed": "skip"}))])
    assert missed[("schedule", "n")].counts_from == day + timedelta(hours=10)


def _on(kind: str) -> Any:
    return lambda subject, items: any(getattr(i.event, "type", "") == kind for i in items)


async def test_a_tick_the_log_did_not_take_is_taken_again_and_the_schedule_goes_on() -> None:
    """Session 32: the log away when a tick was taken (a partition, a leader election): its timer
    was spent and nothing armed another, so the schedule never fired again until a restart."""
    log, clock, sender = MemoryEventLog(), ManualClock(T0), Sender()
    await put(log, cron=None, every_s=10)
    log.inject(_on("ScheduleFired"), TimeoutError("nats: timeout"))
    s = await scheduler_on(log, clock, sender)
    await clock.advance(10)  # @10: not taken
    assert sender.sent == []
    await clock.advance(5)  # taken again 5 s later (on time still: the grace is the interval)
    await follow(log, s)
    await clock.advance(5)
    await follow(log, s)  # and @20 on time
    fired = [r.event for r in await log.read(subjects.governance_filter("a", "schedule")) if r.type == "ScheduleFired"]
    assert [(f.tick - T0).total_seconds() for f in fired] == [10, 20] and len(sender.sent) == 2


async def test_a_ticks_answer_the_log_did_not_take_is_recorded_later_and_the_next_tick_follows() -> None:
    log, clock = MemoryEventLog(), ManualClock(T0)
    await put(log, cron=None, every_s=60)
    log.inject(_on("ScheduleAnswered"), TimeoutError("nats: timeout"))
    sender = Sender()
    raised = [ConnectionError("nats: connection closed")]  # a sender that raised is sent again, as one nobody answered

    async def flaky(*args: Any) -> Answer:
        if raised:
            raise raised.pop()
        return await sender(*args)

    s = Scheduler(log, flaky, clock, "s1")
    s.start({"a": fold(await log.read(subjects.governance_filter("a", "schedule")))})
    await clock.advance(60)  # @60 taken; its request could not be sent
    await follow(log, s)
    await clock.advance(1)  # sent again: a job; its answer not recorded
    await clock.advance(2)  # sent again (the same request_id: the same job), recorded
    await follow(log, s)
    await clock.advance(60)
    await follow(log, s)
    events = [r.event for r in await log.read(subjects.governance_filter("a", "schedule"))]
    answered = [e for e in events if e.type == "ScheduleAnswered"]
    assert [(e.tick - T0).total_seconds() for e in answered] == [60, 120] and all(e.job_id for e in answered)
    assert len({b["request_id"] for *_, b in sender.sent}) == 2
