"""Schedules' ticks (pure): when the next one falls, and what a scheduler does about ticks it
missed while none ran.

A tick is a moment the schedule names (a cron expression in the schedule's time zone, or every
N seconds from the schedule's creation). A scheduler arms one timer per schedule, for the next
tick after the last one the log says was taken (`ScheduleFired`), or after the schedule's
creation, or after its latest resume or change when later (a tick that fell while it was paused
was not missed: nobody wanted it run). Ticks missed while no scheduler ran are handled by the schedule's `missed` policy:

- `once` (the default): the latest missed tick runs once, late (its `ScheduleFired` says how
  late and how many earlier ticks were skipped); the others are skipped. A nightly check missed
  over a weekend runs once on Monday morning, not three times.
- `skip`: none runs; the next tick is the first one to come.

Each tick's request carries a request_id derived from the schedule and the tick, so the planner
maps a tick to one job however often its request is sent.

A schedule on a cluster ends once the log says the cluster was deleted (`cluster_gone`): every
operation on a deleted cluster is refused, and a cluster id is never used again (a new cluster
of the same name is another cluster), so no later tick could run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from contracts.governance import Schedule
from contracts.records import Recorded
from muster.durations import spoken
from muster.readmodel.clusters import fold_cluster

MAX_COUNTED = 10_000
"""Missed ticks counted at most (a every-second schedule down for a day would count 86,400)."""


class ScheduleError(ValueError):
    pass


def zone(schedule: Schedule) -> ZoneInfo:
    try:
        return ZoneInfo(schedule.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(f"unknown time zone {schedule.timezone!r} (an IANA name such as UTC or Europe/Paris)") from None


def check(schedule: Schedule) -> None:
    """ScheduleError naming what is wrong with the timing."""
    zone(schedule)
    if schedule.cron is not None:
        try:
            CronSim(schedule.cron, datetime(2000, 1, 1, tzinfo=UTC))
        except CronSimError as err:
            raise ScheduleError(f"cron {schedule.cron!r}: {err} (5 fields, minute first: '0 3 * * *'; "
                                "or 6, second first)") from None


def describe(schedule: Schedule) -> str:
    """In words, for the console (`At 06:00 on Monday (Europe/Paris)`, `every 10 min`)."""
    if schedule.cron is not None:
        try:
            return f"{CronSim(schedule.cron, datetime(2000, 1, 1, tzinfo=UTC)).explain()} ({schedule.timezone})"
        except (CronSimError, ValueError, IndexError):
            return schedule.cron
    return typed(schedule)


def typed(schedule: Schedule) -> str:
    """As `muster schedule create` takes it, for `muster schedule list`: the cron with its zone
    unless UTC (listed bare beside its next tick in UTC, a Paris cron read an hour off), the
    interval in the unit it was likely typed in (`every 10 min`: `every 600 s` for `--every 10m`)."""
    if schedule.cron is not None:
        return schedule.cron if schedule.timezone == "UTC" else f"{schedule.cron} ({schedule.timezone})"
    return f"every {spoken(schedule.every_s or 0)}"


def next_tick(schedule: Schedule, after: datetime, created_at: datetime) -> datetime:
    """The first tick strictly after `after` (UTC)."""
    if schedule.every_s is not None:
        step = timedelta(seconds=schedule.every_s)
        if after < created_at:
            return created_at + step
        n = int((after - created_at) / step) + 1
        return created_at + n * step
    assert schedule.cron is not None
    local = after.astimezone(zone(schedule))
    found: datetime = next(CronSim(schedule.cron, local))
    return found.astimezone(UTC)


@dataclass(frozen=True)
class Due:
    """What to do now: run `tick` (None: nothing is due), and arm a timer for `next_at`."""

    tick: datetime | None
    next_at: datetime
    late_s: float = 0.0
    skipped: int = 0


def due(schedule: Schedule, last: datetime | None, created_at: datetime, now: datetime,
        counts_from: datetime | None = None) -> Due:
    """The tick to run at `now`, given the last tick taken (None: none yet) and when the schedule
    was last resumed or changed (`Entry.counts_from`): no tick before the later of them runs."""
    start = max((t for t in (last, counts_from) if t is not None), default=created_at)
    first = next_tick(schedule, start, created_at)
    if first > now:
        return Due(None, first)
    latest, missed = first, 0
    while missed < MAX_COUNTED:
        following = next_tick(schedule, latest, created_at)
        if following > now:
            break
        latest, missed = following, missed + 1
    upcoming = next_tick(schedule, now, created_at)
    if schedule.paused:
        return Due(None, upcoming)
    late = (now - latest).total_seconds()
    if schedule.missed == "skip" and late > grace_s(schedule):
        return Due(None, upcoming, skipped=missed + 1)
    return Due(latest, upcoming, late_s=max(0.0, late), skipped=missed)


def listed_due(schedule: Schedule, item: Mapping[str, Any], now: datetime) -> Due:
    """`due` of a schedule as a listing has it (`Entry.to_json`)."""
    def at(key: str) -> datetime | None:
        return datetime.fromisoformat(item[key]) if item.get(key) else None
    return due(schedule, at("last_tick"), datetime.fromisoformat(item["created_at"]), now, at("counts_from"))


def grace_s(schedule: Schedule) -> float:
    """A tick taken this late still counts as on time (a timer that fired a little late, a
    scheduler that took over a dead one's schedules): a minute, or the interval if shorter."""
    return min(60.0, schedule.every_s) if schedule.every_s is not None else 60.0


def request_id(name: str, tick: datetime) -> str:
    return f"sched-{name}-{int(tick.timestamp() * 1000)}"


def cluster_of(schedule: Schedule) -> str | None:
    """The cluster the schedule's operation names (None: a create, an operation on a job)."""
    cluster_id = schedule.command.get("cluster_id")
    return str(cluster_id) if cluster_id else None


def cluster_gone(history: Sequence[Recorded]) -> str:
    """Why a schedule on the cluster with these (its own) events ends: '' unless it is deleted."""
    cluster = fold_cluster(history)
    return f"cluster {cluster.name} was deleted (job {cluster.job_id})" if cluster is not None and cluster.status == "deleted" else ""


def refused_ticks(schedule: Schedule, history: Sequence[Recorded]) -> str:
    """Why the ticks of this schedule would be refused on the cluster with these events, in the
    problem's own words ('' if one may run): it is deleted, or the schedule extends the lease of a
    cluster that has none (a lease is set at create only, so every tick would be refused `nothing
    to extend`), or it expands (shrinks) the cluster to a size it has already passed. That last
    one depends on the size at the tick: it is refused at creation as the tick would be then."""
    gone = cluster_gone(history)
    if gone:
        return f"{gone}: its operation could never run"
    cluster = fold_cluster(history)
    if cluster is None:
        return ""
    if schedule.command.get("type") == "ExtendLease" and cluster.expires_at is None:
        return f"cluster {cluster.name} has no lease (it expires never): its operation could never run"
    return _size_passed(schedule, cluster.name, len(cluster.nodes))


def _size_passed(schedule: Schedule, name: str, has: int) -> str:
    kind, target = schedule.command.get("type"), schedule.command.get("nodes")
    if not isinstance(target, int):
        return ""
    if kind == "ExpandCluster" and target <= has:
        return (f"it expands cluster {name} to {_nodes(target)} and the cluster has {has}: a tick is refused while the "
                f"cluster has {target} or more (an expand needs more nodes than the cluster has); give more than {has}")
    if kind == "ShrinkCluster" and target >= has:
        return (f"it shrinks cluster {name} to {_nodes(target)} and the cluster has {has}: a tick is refused while the "
                f"cluster has {target} or fewer (a shrink needs fewer nodes than the cluster has); give fewer than {has}")
    return ""


def _nodes(n: int) -> str:
    return f"{n} node" if n == 1 else f"{n} nodes"
