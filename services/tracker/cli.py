"""Operator commands: `muster status|watch|history|replay|events` (docs/tracker.md).

They find NATS by `--nats-url`, `$NATS_URL`, or `<data-dir>/nats.url` (written by `muster up`),
and the tracker by `--tracker-url`, `$MUSTER_TRACKER_URL` or `<data-dir>/tracker.url`.
Exit codes: 0 ok (for `watch`: the job succeeded), 1 the job failed or rolled back, 2 bad
input or an unknown job/cluster, 3 a deadline passed, 4 NATS or the tracker unreachable.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import click
from nats.js.api import ConsumerConfig, DeliverPolicy
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from contracts import subjects
from muster.bus.connect import DEFAULT_URL, bearer_headers, connect
from muster.bus.eventstore import EventStore, Recorded, inflate, recorded_from_msg
from muster.readmodel.clusters import cluster_view, job_ids, prefix
from muster.readmodel.progress import JobProgress
from muster.readmodel.status import status_from_log
from muster.readmodel.timeline import place, timeline

from .api import TENANT_HEADER, UUID_PATTERN
from .app import Tracker, event_json

EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_DEADLINE, EXIT_UNREACHABLE = 0, 1, 2, 3, 4
T = TypeVar("T")


class Stop(Exception):
    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message)
        self.code = code


# -- where things are ---------------------------------------------------------------------------


def _saved(data_dir: Path, name: str) -> str | None:
    path = data_dir / name
    return path.read_text().strip() if path.exists() else None


def nats_url_of(explicit: str | None, data_dir: Path) -> str:
    return explicit or os.environ.get("NATS_URL") or _saved(data_dir, "nats.url") or DEFAULT_URL


def tracker_url_of(explicit: str | None, data_dir: Path) -> str:
    return (explicit or os.environ.get("MUSTER_TRACKER_URL") or _saved(data_dir, "tracker.url") or "http://127.0.0.1:8080").rstrip("/")


def common(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--tenant", default="default", show_default=True, help="the tenant the job or cluster belongs to")(f)
    f = click.option("--nats-url", default=None, help="NATS URL (default: $NATS_URL, <data-dir>/nats.url, or the local default)")(f)
    return click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=Path(".muster"),
                        show_default=True, help="where `muster up` wrote nats.url and tracker.url")(f)


def _check(value: str, pattern: str, what: str) -> str:
    if not re.fullmatch(pattern, value):
        raise Stop(EXIT_INVALID, f"{what} {value!r} is not valid")
    return value.lower() if pattern == UUID_PATTERN else value


def run(work: Callable[[], Awaitable[int]]) -> None:
    """Run a command's coroutine; its result, or a Stop, is the exit code."""
    try:
        code = asyncio.run(work())
    except Stop as stop:
        if str(stop):
            click.echo(f"muster: {stop}", err=True)
        code = stop.code
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


async def _with_store(url: str, use: Callable[[EventStore], Awaitable[T]]) -> T:
    try:
        nc = await connect(url, name="muster-cli", max_reconnect_attempts=0, allow_reconnect=False)
    except Exception as err:
        raise Stop(EXIT_UNREACHABLE, f"cannot reach NATS at {url}: {err or type(err).__name__}") from None
    try:
        return await use(EventStore(nc))
    finally:
        await nc.close()


# -- status -----------------------------------------------------------------------------------


@click.command("status")
@click.argument("job_id")
@common
@click.option("--tracker-url", default=None, help="the tracker (default: $MUSTER_TRACKER_URL or <data-dir>/tracker.url)")
@click.option("--json", "as_json", is_flag=True, help="print the tracker's JSON answer")
def status(job_id: str, data_dir: Path, nats_url: str | None, tenant: str, tracker_url: str | None, as_json: bool) -> None:
    """A job's status: from the tracker, or straight from the bus when no tracker answers."""

    async def main() -> int:
        job = _check(job_id, UUID_PATTERN, "job id")
        _check(tenant, subjects.TOKEN.pattern, "tenant")
        body = await _status_from_tracker(tracker_url_of(tracker_url, data_dir), tenant, job)
        if body is None:
            body = await _with_store(nats_url_of(nats_url, data_dir), lambda s: Tracker(s).job_status(tenant, job))
        if body is None:
            raise Stop(EXIT_INVALID, f"no job {job} in tenant {tenant}")
        if as_json:
            click.echo(json.dumps(body, indent=2))
        else:
            print_status(body, Console())
        return EXIT_OK

    run(main)


async def _status_from_tracker(url: str, tenant: str, job_id: str) -> dict[str, Any] | None:
    """The tracker's answer; None when there is no tracker to ask (or it has no such job)."""
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            async with http.get(f"{url}/v1/jobs/{job_id}", headers={TENANT_HEADER: tenant, **bearer_headers()}) as resp:
                if resp.status != 200:
                    return None
                return await resp.json()  # type: ignore[no-any-return]
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


def print_status(body: dict[str, Any], console: Console) -> None:
    stage = body.get("stage") or {}
    counts = ", ".join(f"{n} {s}" for s, n in body.get("counts", {}).items()) or "no tasks yet"
    console.print(f"job {body['id']}: [bold]{body['state']}[/bold] ({body['operation']} of cluster {body['cluster_id']})")
    console.print(f"  owner {body.get('owner') or '?'} · answered from the {body.get('source')} · requested by {body.get('requested_by')}")
    console.print(f"  started {body.get('started_at')} · finished {body.get('finished_at') or '-'}")
    console.print(f"  tasks: {counts} of {body.get('tasks_total', 0)} · stage {stage.get('current') or '-'} of {stage.get('total', 0)}")
    if body.get("error"):
        console.print(f"  error: {body['error']}")
    if body.get("tasks"):
        table = Table(show_edge=False)
        for col in ("task", "state", "attempt", "node", "runs on"):
            table.add_column(col)
        for t in body["tasks"]:
            where = place(t.get("provisioner"), t.get("worker"))
            table.add_row(t["id"], t["state"], str(t["attempt"]), t.get("node") or "", where)
        console.print(table)


# -- watch ----------------------------------------------------------------------------------------


@click.command("watch")
@click.argument("job_id")
@common
@click.option("--timeout", "deadline", type=float, default=None, help="give up after this many seconds (exit 3)")
def watch(job_id: str, data_dir: Path, nats_url: str | None, tenant: str, deadline: float | None) -> None:
    """Follow a job live, stage by stage, until it ends. Exit 0 if it succeeded, 1 if not."""

    async def main() -> int:
        job = _check(job_id, UUID_PATTERN, "job id")
        _check(tenant, subjects.TOKEN.pattern, "tenant")
        return await _with_store(nats_url_of(nats_url, data_dir), lambda s: _watch(Tracker(s), tenant, job, deadline))

    run(main)


async def _watch(tracker: Tracker, tenant: str, job_id: str, deadline: float | None) -> int:
    if not await tracker.job_exists(tenant, job_id):
        raise Stop(EXIT_INVALID, f"no job {job_id} in tenant {tenant}")
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
        raise Stop(EXIT_DEADLINE, f"job {job_id} still {_state(progress)} after {deadline} s") from None
    finally:
        if view is not None:
            view.close()
    status = progress.status() or {}
    state = status.get("state", "?")
    error = f": {status['error']}" if status.get("error") else ""
    click.echo(f"job {job_id} {state}{error} ({status.get('tasks_total', 0)} tasks)")
    return EXIT_OK if state == "succeeded" else EXIT_FAILED


def _state(progress: JobProgress) -> str:
    status = progress.status()
    return str(status["state"]) if status else "unplanned"


class LiveView:
    """One bar for the job and one per stage of the plan being run."""

    def __init__(self, console: Console) -> None:
        self.bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                             console=console)
        self.bars.start()
        self.job = self.bars.add_task("job: waiting for a plan", total=None)
        self.stages: list[TaskID] = []
        self.phase = ""

    def update(self, progress: JobProgress, step: dict[str, Any]) -> None:
        stages = progress.stage_progress()
        if progress.phase != self.phase or len(stages) != len(self.stages):
            for bar in self.stages:
                self.bars.remove_task(bar)
            self.phase = progress.phase
            self.stages = [self.bars.add_task("", total=s["total"]) for s in stages]
        for bar, s in zip(self.stages, stages):
            running = f" · {', '.join(s['running'][:3])}" if s["running"] else ""
            failed = f" · {s['failed']} failed" if s["failed"] else ""
            self.bars.update(bar, completed=s["done"], description=f"  {self.phase} stage {s['stage']}{failed}{running}")
        done = step["counts"].get("succeeded", 0)
        self.bars.update(self.job, total=step["tasks_total"] or None, completed=done,
                         description=f"job {step['state']}: {step['text']}"[:70])

    def close(self) -> None:
        self.bars.stop()


# -- history -------------------------------------------------------------------------------------


@click.command("history")
@click.argument("job_id", required=False)
@click.option("--cluster", "cluster_id", default=None, help="the whole history of a cluster: its events and its jobs'")
@common
@click.option("--json", "as_json", is_flag=True, help="one JSON object per line")
def history(job_id: str | None, cluster_id: str | None, data_dir: Path, nats_url: str | None, tenant: str, as_json: bool) -> None:
    """A readable timeline from the log: who requested what, the layout, the plan, every claim,
    result, retry and rollback, with times and durations."""

    async def main() -> int:
        if (job_id is None) == (cluster_id is None):
            raise Stop(EXIT_INVALID, "name a JOB or a --cluster (one of them)")
        _check(tenant, subjects.TOKEN.pattern, "tenant")

        async def read(store: EventStore) -> list[Recorded]:
            if job_id is not None:
                return await store.read_many(subjects.job_history_filters(tenant, _check(job_id, UUID_PATTERN, "job id")))
            return await _cluster_history(store, tenant, _check(str(cluster_id), UUID_PATTERN, "cluster id"))

        events = await _with_store(nats_url_of(nats_url, data_dir), read)
        if not events:
            raise Stop(EXIT_INVALID, f"nothing in the log for {'job ' + str(job_id) if job_id else 'cluster ' + str(cluster_id)} in tenant {tenant}")
        for line in timeline(events):
            click.echo(json.dumps(line.to_json()) if as_json else line.render())
        return EXIT_OK

    run(main)


async def _cluster_history(store: EventStore, tenant: str, cluster_id: str, up_to_seq: int | None = None) -> list[Recorded]:
    own = await store.read(subjects.cluster_events(tenant, cluster_id), up_to_seq=up_to_seq)
    merged = {r.seq: r for r in own}
    for job in job_ids(own):
        for r in await store.read_many(subjects.job_history_filters(tenant, job), up_to_seq=up_to_seq):
            merged[r.seq] = r
    return [merged[s] for s in sorted(merged)]


# -- replay ----------------------------------------------------------------------------------------


@click.command("replay")
@click.option("--cluster", "cluster_id", required=True, help="the cluster to rebuild")
@click.option("--at", "at", default=None, help="as it was at this time (ISO 8601; UTC if no zone)")
@click.option("--seq", "seq", type=click.IntRange(min=0), default=None, help="as it was after this log sequence")
@common
@click.option("--json", "as_json", is_flag=True, help="print JSON (sorted keys)")
def replay(cluster_id: str, at: str | None, seq: int | None, data_dir: Path, nats_url: str | None, tenant: str, as_json: bool) -> None:
    """Rebuild a cluster's state from the log as it was at a point in time or of the log, with
    its jobs as they stood then. The same point always prints the same output."""

    async def main() -> int:
        if at is not None and seq is not None:
            raise Stop(EXIT_INVALID, "give --at or --seq, not both")
        cluster = _check(cluster_id, UUID_PATTERN, "cluster id")
        _check(tenant, subjects.TOKEN.pattern, "tenant")
        when = parse_time(at) if at is not None else None
        state = await _with_store(nats_url_of(nats_url, data_dir), lambda s: replay_cluster(s, tenant, cluster, seq, when))
        if state is None:
            raise Stop(EXIT_INVALID, f"cluster {cluster} had no events in tenant {tenant} at that point")
        click.echo(json.dumps(state, indent=2, sort_keys=True) if as_json else render_replay(state))
        return EXIT_OK

    run(main)


async def replay_cluster(store: EventStore, tenant: str, cluster_id: str, seq: int | None, at: datetime | None) -> dict[str, Any] | None:
    """The cluster and its jobs from the events up to log sequence `seq`, or up to time `at`."""
    own = prefix(await store.read(subjects.cluster_events(tenant, cluster_id), up_to_seq=seq), seq, at)
    if not own:
        return None
    included = own[-1].seq
    jobs = []
    for job in job_ids(own):
        history = prefix(await store.read_many(subjects.job_history_filters(tenant, job), up_to_seq=seq), seq, at)
        status = status_from_log(history)
        if status is not None:
            included = max(included, history[-1].seq)
            jobs.append({"id": job, "operation": status["operation"], "state": status["state"], "error": status["error"],
                         "counts": status["counts"], "tasks_total": status["tasks_total"]})
    view = cluster_view(own)
    assert view is not None
    return {"as_of": {"seq": seq if seq is not None else included, "at": at.isoformat() if at else None,
                      "cluster_event_seq": own[-1].seq, "cluster_event_time": own[-1].time.isoformat()},
            "cluster": view, "jobs": jobs}


def render_replay(state: dict[str, Any]) -> str:
    c, asof = state["cluster"], state["as_of"]
    lines = [
        f"cluster {c['id']} ({c['name']!r}, tenant {c['tenant']}) as of "
        + (f"{asof['at']} (log sequence {asof['seq']})" if asof["at"] else f"log sequence {asof['seq']}"),
        f"  its last event then: #{asof['cluster_event_seq']} at {asof['cluster_event_time']}",
        f"  status {c['status']}" + (f" ({c['status_reason']})" if c["status_reason"] else "") + f", current job {c['job_id']}",
        f"  template {c['template']}, provider {c['provider']}, {len(c['nodes'])} nodes",
    ]
    for n in c["nodes"]:
        ips = ", ".join(f"{k} {v}" for k, v in n["ipaddresses"].items())
        lines.append(f"    {n['id']:<8} {n['hostname']:<28} {n['hardwaretype']}/{n['imagetype']}  [{', '.join(n['services'])}]"
                     + (f"  {ips}" if ips else ""))
    lines.append(f"  jobs ({len(state['jobs'])}):")
    for j in state["jobs"]:
        counts = ", ".join(f"{n} {s}" for s, n in j["counts"].items())
        lines.append(f"    {j['id']} {j['operation']:<16} {j['state']:<16} {counts}" + (f"  error: {j['error']}" if j["error"] else ""))
    return "\n".join(lines)


def parse_time(text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise Stop(EXIT_INVALID, f"time {text!r} is not ISO 8601 (e.g. 2026-05-01T12:00:00Z)") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


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
    except Stop:
        raise Stop(EXIT_INVALID, f"--since {text!r}: give a log sequence, an ISO 8601 time, or an age such as 10m") from None


def events_filter(tenant: str | None, pattern: str | None) -> str:
    if pattern and pattern.startswith(subjects.EVT + "."):
        return pattern
    if pattern and pattern.startswith("muster."):
        raise Stop(EXIT_INVALID, f"--subject {pattern!r} is not in the log ({subjects.EVT}.>)")
    if tenant is not None:
        _check(tenant, subjects.TOKEN.pattern, "tenant")
    return f"{subjects.EVT}.{tenant or '*'}.{pattern or '>'}"


@click.command("events")
@click.option("--tenant", default=None, help="only this tenant's events (default: every tenant)")
@click.option("--subject", "pattern", default=None,
              help="a subject pattern under the tenant (job.*, task.<job>.>, ...) or a whole muster.evt.… subject")
@click.option("--since", default=None, help="from a log sequence, an ISO 8601 time, or an age (30s, 10m, 2h, 1d)")
@click.option("--follow", "-f", is_flag=True, help="keep printing new events as they are appended")
@click.option("--nats-url", default=None, help="NATS URL (default: $NATS_URL, <data-dir>/nats.url, or the local default)")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=Path(".muster"), show_default=True)
def events(tenant: str | None, pattern: str | None, since: str | None, follow: bool, nats_url: str | None, data_dir: Path) -> None:
    """Dump (or tail, with --follow) raw events as JSON lines, for scripts."""

    async def main() -> int:
        subject = events_filter(tenant, pattern)
        start = parse_since(since, datetime.now(timezone.utc)) if since else 1
        await _with_store(nats_url_of(nats_url, data_dir), lambda s: dump_events(s, subject, start, follow))
        return EXIT_OK

    run(main)


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

