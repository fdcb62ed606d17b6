"""Operator commands: `muster status|watch|history|replay|events` (docs/tracker.md).

They follow the one front end of the `muster` commands (muster/cli_support.py, muster/cli_bus.py):
the same bus options, errors and exit codes as every other command (docs/client.md). The
tracker is found by `--tracker-url`, `$MUSTER_TRACKER_URL` or `<data-dir>/tracker.url`.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import aiohttp
import click
from nats.js.api import ConsumerConfig, DeliverPolicy
from rich.console import Console

from contracts import subjects
from contracts.records import Recorded
from muster.bus.connect import bearer_headers
from muster.bus.eventstore import EventStore, inflate, recorded_from_msg
from muster.bus.snapshotstore import SnapshotStore
from muster.cli_bus import Bus, bus_options, open_nats
from muster.cli_support import EXIT_FAILED, EXIT_INVALID, EXIT_UNREACHABLE, CliError, command, json_option, stop
from muster.readmodel.progress import JobProgress
from muster.readmodel.timeline import timeline

from .api import TENANT_HEADER, UUID_PATTERN
from .app import Tracker, event_json
from .render import LiveView, print_status, render_replay
from .story import cluster_history, replay_cluster

T = TypeVar("T")


def _check(value: str, pattern: str, what: str) -> str:
    if not re.fullmatch(pattern, value):
        raise CliError(f"{what} {value!r} is not valid", EXIT_INVALID)
    return value.lower() if pattern == UUID_PATTERN else value


async def _with_store(bus: Bus, use: Callable[[EventStore], Awaitable[T]]) -> T:
    async with open_nats(bus) as nc:
        return await use(EventStore(nc))


# -- status -----------------------------------------------------------------------------------


@click.command("status")
@click.argument("job_id")
@bus_options
@click.option("--tracker-url", default=None, help="the tracker (default: $MUSTER_TRACKER_URL or <data-dir>/tracker.url)")
@json_option
@command
async def status(job_id: str, bus: Bus, tracker_url: str | None, as_json: bool) -> None:
    """A job's status: from the tracker, or straight from the bus when no tracker answers."""
    job, tenant = _check(job_id, UUID_PATTERN, "job id"), _check(bus.tenant, subjects.TOKEN.pattern, "tenant")
    body = await _status_from_tracker(bus, bus.tracker_url(tracker_url), tenant, job)
    if body is None:
        body = await _with_store(bus, lambda s: Tracker(s, nc=s.nc).job_status(tenant, job))
    if body is None:
        raise CliError(f"no job {job} in tenant {tenant}", EXIT_INVALID)
    if as_json:
        click.echo(json.dumps(body, indent=2))
    else:
        print_status(body, Console())


async def _status_from_tracker(bus: Bus, url: str, tenant: str, job_id: str) -> dict[str, Any] | None:
    """The tracker's answer; None when there is no tracker to ask (or it has no such job)."""
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            async with http.get(f"{url}/v1/jobs/{job_id}", headers={TENANT_HEADER: tenant, **bearer_headers()},
                                ssl=bus.http_ssl()) as resp:
                if resp.status != 200:
                    return None
                return await resp.json()
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


# -- watch ----------------------------------------------------------------------------------------


@click.command("watch")
@click.argument("job_id")
@bus_options
@click.option("--timeout", "deadline", type=float, default=None, help="give up after this many seconds (exit 3)")
@command
async def watch(job_id: str, bus: Bus, deadline: float | None) -> None:
    """Follow a job live, stage by stage, until it ends. Exit 0 if it succeeded, 1 if not."""
    job, tenant = _check(job_id, UUID_PATTERN, "job id"), _check(bus.tenant, subjects.TOKEN.pattern, "tenant")
    state = await _with_store(bus, lambda s: _watch(Tracker(s, nc=s.nc), tenant, job, deadline))
    if state != "succeeded":
        raise stop(EXIT_FAILED)


async def _watch(tracker: Tracker, tenant: str, job_id: str, deadline: float | None) -> str:
    """Draws the job's progress; returns the state it ended in."""
    if not await tracker.job_exists(tenant, job_id):
        raise CliError(f"no job {job_id} in tenant {tenant}", EXIT_INVALID)
    console = Console()
    progress = JobProgress()
    view = LiveView(console) if console.is_terminal else None
    try:
        async with asyncio.timeout(deadline):
            async for recorded in tracker.follow(tenant, job_id):
                assert recorded is not None
                step = progress.apply(recorded)
                if view is not None:
                    view.update(progress, step)
                else:
                    click.echo(f"{recorded.time.isoformat(timespec='milliseconds')}  {step['text']}"
                               + (f"  [{step['who']}]" if step["who"] else ""))
    except TimeoutError:
        raise CliError(f"job {job_id} still {_state(progress)} after {deadline} s", EXIT_UNREACHABLE) from None
    finally:
        if view is not None:
            view.close()
    status = progress.status() or {}
    state = str(status.get("state", "?"))
    error = f": {status['error']}" if status.get("error") else ""
    click.echo(f"job {job_id} {state}{error} ({status.get('tasks_total', 0)} tasks)")
    return state


def _state(progress: JobProgress) -> str:
    status = progress.status()
    return str(status["state"]) if status else "unplanned"


# -- history -------------------------------------------------------------------------------------


@click.command("history")
@click.argument("job_id", required=False)
@click.option("--cluster", "cluster_id", default=None, help="the whole history of a cluster: its events and its jobs'")
@bus_options
@click.option("--json", "as_json", is_flag=True, help="one JSON object per line")
@command
async def history(job_id: str | None, cluster_id: str | None, bus: Bus, as_json: bool) -> None:
    """A readable timeline from the log: who requested what, the layout, the plan, every claim,
    result, retry and rollback, with times and durations."""
    if (job_id is None) == (cluster_id is None):
        raise CliError("name a JOB or a --cluster (one of them)", EXIT_INVALID)
    tenant = _check(bus.tenant, subjects.TOKEN.pattern, "tenant")

    async def read(store: EventStore) -> list[Recorded]:
        if job_id is not None:
            return await store.read_many(subjects.job_history_filters(tenant, _check(job_id, UUID_PATTERN, "job id")))
        return await cluster_history(store, tenant, _check(str(cluster_id), UUID_PATTERN, "cluster id"))

    events = await _with_store(bus, read)
    if not events:
        what = f"job {job_id}" if job_id else f"cluster {cluster_id}"
        raise CliError(f"nothing in the log for {what} in tenant {tenant}", EXIT_INVALID)
    for line in timeline(events):
        click.echo(json.dumps(line.to_json()) if as_json else line.render())


# -- replay ----------------------------------------------------------------------------------------


@click.command("replay")
@click.option("--cluster", "cluster_id", required=True, help="the cluster to rebuild")
@click.option("--at", "at", default=None, help="as it was at this time (ISO 8601; UTC if no zone)")
@click.option("--seq", "seq", type=click.IntRange(min=0), default=None, help="as it was after this log sequence")
@bus_options
@click.option("--json", "as_json", is_flag=True, help="print JSON (sorted keys)")
@command
async def replay(cluster_id: str, at: str | None, seq: int | None, bus: Bus, as_json: bool) -> None:
    """Rebuild a cluster's state from the log as it was at a point in time or of the log, with
    its jobs as they stood then. The same point always prints the same output."""
    if at is not None and seq is not None:
        raise CliError("give --at or --seq, not both", EXIT_INVALID)
    cluster = _check(cluster_id, UUID_PATTERN, "cluster id")
    tenant = _check(bus.tenant, subjects.TOKEN.pattern, "tenant")
    when = parse_time(at) if at is not None else None
    state = await _with_store(bus, lambda s: replay_cluster(s, tenant, cluster, seq, when, SnapshotStore(s.nc)))
    if state is None:
        raise CliError(f"cluster {cluster} had no events in tenant {tenant} at that point", EXIT_INVALID)
    click.echo(json.dumps(state, indent=2, sort_keys=True) if as_json else render_replay(state))


def parse_time(text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise CliError(f"time {text!r} is not ISO 8601 (e.g. 2026-05-01T12:00:00Z)", EXIT_INVALID) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


# -- events ------------------------------------------------------------------------------------------

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")


def parse_since(text: str, now: datetime) -> int | datetime:
    """A log sequence (`1234`), a time (ISO 8601) or an age (`30s`, `10m`, `2h`, `1d`)."""
    if text.isdigit():
        return int(text)
    m = _DURATION.fullmatch(text)
    if m:
        return now - timedelta(seconds=float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)])
    try:
        return parse_time(text)
    except CliError:
        raise CliError(f"--since {text!r}: give a log sequence, an ISO 8601 time, or an age such as 10m", EXIT_INVALID) from None


def events_filter(tenant: str | None, pattern: str | None) -> str:
    if pattern and pattern.startswith(subjects.EVT + "."):
        return pattern
    if pattern and pattern.startswith("muster."):
        raise CliError(f"--subject {pattern!r} is not in the log ({subjects.EVT}.>)", EXIT_INVALID)
    if tenant is not None:
        _check(tenant, subjects.TOKEN.pattern, "tenant")
    return f"{subjects.EVT}.{tenant or '*'}.{pattern or '>'}"


@click.command("events")
@click.option("--subject", "pattern", default=None,
              help="a subject pattern under the tenant (job.*, task.<job>.>, ...) or a whole muster.evt.… subject")
@click.option("--since", default=None, help="from a log sequence, an ISO 8601 time, or an age (30s, 10m, 2h, 1d)")
@click.option("--follow", "-f", is_flag=True, help="keep printing new events as they are appended")
@bus_options(all_tenants=True)
@command
async def events(pattern: str | None, since: str | None, follow: bool, bus: Bus) -> None:
    """Dump (or tail, with --follow) raw events as JSON lines, for scripts."""
    subject = events_filter(bus.tenant, pattern)
    start = parse_since(since, datetime.now(UTC)) if since else 1
    await _with_store(bus, lambda s: dump_events(s, subject, start, follow))


async def dump_events(store: EventStore, subject: str, start: int | datetime, follow: bool) -> None:
    first = start if isinstance(start, int) else 1
    last = first - 1
    for r in await store.read(subject, start_seq=max(first, 1)):
        if isinstance(start, datetime) and r.time < start:
            continue
        click.echo(json.dumps(event_json(r)))
        last = r.seq
    if not follow:
        return
    queue: asyncio.Queue[Any] = asyncio.Queue()
    sub = await store.js.subscribe(subject, stream=subjects.EVENTS_STREAM, ordered_consumer=True, cb=queue.put,
                                   deliver_policy=DeliverPolicy.BY_START_SEQUENCE, idle_heartbeat=2.0,
                                   config=ConsumerConfig(opt_start_seq=max(last + 1, first, 1)))
    try:
        while True:
            click.echo(json.dumps(event_json(await inflate(store.bodies, recorded_from_msg(await queue.get())))))
    finally:
        await sub.unsubscribe()

