"""Operator commands: `muster status|watch|history|logs|replay|events` (docs/tracker.md).

They read through the tracker's HTTP API with the token in use, as every reading command does
(docs/decisions/0016-people-through-the-tracker.md): a tenant's user sees what its grants let
it read, a super admin any tenant (`--tenant`). They follow the one front end of the `muster`
commands (muster/cli_support.py, muster/cli_bus.py): the same options, errors and exit codes.
"""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from contracts import subjects
from contracts.events import FENCE_MARKERS
from muster.cli_bus import Bus, bus_options
from muster.cli_support import (
    EXIT_FAILED,
    EXIT_INVALID,
    EXIT_UNREACHABLE,
    CliError,
    Duration,
    WholeNumber,
    command,
    following,
    job_id_of,
    json_flag,
    json_option,
    stop,
)
from muster.readmodel.output import attempt_outputs
from muster.readmodel.output import render as render_outputs
from muster.readmodel.progress import JobProgress
from muster.readmodel.timeline import timeline
from muster.tables import Output
from muster.times import shown_time
from muster.tracker_client import LAST_SEQ, TrackerReads, recorded

from .render import LiveView, print_status, render_replay


def _check(value: str, pattern: str, what: str) -> str:
    if not re.fullmatch(pattern, value):
        raise CliError(f"{what} {value!r} is not valid", EXIT_INVALID)
    return value


# -- status -----------------------------------------------------------------------------------


@click.command("status")
@click.argument("job_id", required=False, metavar="JOB_ID")  # (asked for: job_id_of says where jobs are listed)
@bus_options
@json_option
@command
async def status(job_id: str | None, bus: Bus, as_json: bool) -> None:
    """A job's status, from the tracker (its owner's view, or the log's)."""
    job = job_id_of(job_id, "muster status")
    async with TrackerReads(bus) as tracker:
        body = await tracker.get(f"/v1/jobs/{job}")
        name = None if as_json else await _cluster_name(tracker, str(body.get("cluster_id") or ""))
    if as_json:  # one document on one line, as --json says everywhere (it was indented)
        click.echo(json.dumps(body))
    else:
        print_status(body, Output(soft_wrap=True), name)


async def _cluster_name(tracker: TrackerReads, cluster_id: str) -> str | None:
    """What the person called the cluster (best effort: the status reads without it)."""
    try:
        return str((await tracker.get(f"/v1/clusters/{cluster_id}"))["name"]) if cluster_id else None
    except (CliError, KeyError):
        return None


# -- watch ----------------------------------------------------------------------------------------


@click.command("watch")
@click.argument("job_id", required=False, metavar="JOB_ID")
@bus_options
@click.option("--timeout", "deadline", type=Duration(), default=None, help="give up after this long, exit 3 (seconds, or 90s, 10m, 2h)")
@following
async def watch(job_id: str | None, bus: Bus, deadline: float | None) -> None:
    """Follow a job live, stage by stage, until it ends. Exit 0 if it succeeded, 1 if not."""
    job = job_id_of(job_id, "muster watch")
    async with TrackerReads(bus) as tracker:
        state = await _watch(tracker, job, deadline)
    if state != "succeeded":
        raise stop(EXIT_FAILED)


async def _watch(tracker: TrackerReads, job_id: str, deadline: float | None) -> str:
    """Draws the job's progress; returns the state it ended in."""
    console = Output()
    progress = JobProgress()
    view: LiveView | None = None
    last: Any = None
    for warning in await _warnings(tracker, job_id):
        click.echo(f"warning: {warning}", err=True)
    try:
        async with asyncio.timeout(deadline):
            async for item in tracker.events(job=job_id, follow=True):
                r = last = recorded(item)
                step = progress.apply(r)
                if view is None and console.is_terminal:
                    view = LiveView(console)  # only once the job is known to be there (and readable)
                if view is not None:
                    view.update(progress, step)
                elif r.type not in FENCE_MARKERS:  # the log's, not the story's (as `muster history`)
                    click.echo(f"{shown_time(r.time)}  {step['text']}"
                               + (f"  [{step['who']}]" if step["who"] else ""))
    except TimeoutError:
        # Said as of the last event read: a long story may not be read to its end in time (a
        # job over for hours was "still running").
        if last is None:
            raise CliError(f"job {job_id}: none of its events read within {deadline:g} s (--timeout)", EXIT_UNREACHABLE) from None
        raise CliError(f"job {job_id} was {_state(progress)} at the last of its events read (#{last.seq}, "
                       f"{shown_time(last.time)}) when {deadline:g} s (--timeout) ran out", EXIT_UNREACHABLE) from None
    finally:
        if view is not None:
            view.close()
    status = progress.status() or {}
    state = str(status.get("state", "?"))
    error = f": {status['error']}" if status.get("error") else ""
    click.echo(f"job {job_id} {state}{error} ({status.get('tasks_total', 0)} tasks)")
    return state


async def _warnings(tracker: TrackerReads, job_id: str) -> list[str]:
    """Why the job may not move now, said once before following it: a job whose tasks no
    provisioner would take shows nothing but its queued tasks, then silence."""
    try:
        body = await tracker.get(f"/v1/jobs/{job_id}")
    except CliError:
        return []  # following it says what is wrong
    return [str(w) for w in body.get("warnings") or []]


def _state(progress: JobProgress) -> str:
    status = progress.status()
    return str(status["state"]) if status else "unplanned"


# -- history -------------------------------------------------------------------------------------


@click.command("history")
@click.argument("job_id", required=False, metavar="[JOB_ID]")  # or --cluster, or --governance: its own error below
@click.option("--cluster", "cluster_ref", default=None, metavar="CLUSTER",
              help="the whole history of a cluster (its id or name): its events and its jobs'")
@click.option("--governance", is_flag=True, help="the tenant's governance decisions: rules, policies, subscriptions and "
              "schedules put and deleted (by whom), schedules' ticks, requests the policies denied")
@bus_options
@json_flag("one JSON object per line")
@command
async def history(job_id: str | None, cluster_ref: str | None, governance: bool, bus: Bus, as_json: bool) -> None:
    """A readable timeline from the log, of a job (JOB_ID), a cluster (--cluster) or the tenant's
    governance (--governance): who requested what, the layout, the plan, every claim, result,
    retry and rollback, with times and durations."""
    if [job_id is not None, cluster_ref is not None, governance].count(True) != 1:
        raise CliError("name a JOB, a --cluster or --governance (one of them)", EXIT_INVALID)
    async with TrackerReads(bus) as tracker:
        if governance:  # docs/governance.md: each decision an event with its principal
            merged = {r.seq: r for pattern in ("gov.>", "denied.*") for r in await tracker.history(subject=pattern)}
            events = [merged[seq] for seq in sorted(merged)]
        else:
            events = await tracker.history(**({"job": job_id_of(job_id, "muster history")} if job_id else {"cluster": cluster_ref}))
    if not events and governance:  # a tenant that made none yet: an answer, not an error
        click.echo("no governance decisions" + (f" in tenant {bus.asked}" if bus.asked else "") + " yet")
        return
    if not events:
        what = f"job {job_id}" if job_id else f"cluster {cluster_ref}"
        raise CliError(f"nothing in the log for {what}", EXIT_INVALID)
    for line in timeline(events):
        click.echo(json.dumps(line.to_json()) if as_json else line.render())


# -- logs ----------------------------------------------------------------------------------------


@click.command("logs")
@click.argument("job_id", required=False, metavar="JOB_ID")
@click.argument("task_id", required=False, metavar="[TASK]")
@bus_options
@json_flag("one JSON object per attempt")
@command
async def logs(job_id: str | None, task_id: str | None, bus: Bus, as_json: bool) -> None:
    """What a job's tasks said, each attempt: the stdout and stderr of those that ended, the
    lines a running one reported so far (TASK: that task's attempts only, e.g. n1000.install.base)."""
    job = job_id_of(job_id, "muster logs")
    async with TrackerReads(bus) as tracker:
        events = await tracker.history(job=job)
    if not events:
        raise CliError(f"nothing in the log for job {job}", EXIT_INVALID)
    outputs = attempt_outputs(events, task_id)
    if not outputs:
        what = f"task {task_id} of job {job} has" if task_id else f"job {job} has"
        raise CliError(f"{what} no attempt a provisioner took yet (`muster status {job}` lists its tasks)",
                       EXIT_INVALID if task_id else EXIT_FAILED)
    for line in ([json.dumps(o.to_json()) for o in outputs] if as_json else render_outputs(outputs)):
        click.echo(line)


# -- replay ----------------------------------------------------------------------------------------


@click.command("replay")
@click.option("--cluster", "cluster_ref", required=True, metavar="CLUSTER", help="the cluster to rebuild (its id or name)")
@click.option("--at", "at", default=None, help="as it was at this time (ISO 8601, UTC if no zone; or as the CLI shows times: '2026-12-01 01:43:39 UTC')")
@click.option("--seq", "seq", type=WholeNumber(0), default=None, help="as it was after this log sequence")
@bus_options
@json_flag("print JSON (sorted keys)")
@command
async def replay(cluster_ref: str, at: str | None, seq: int | None, bus: Bus, as_json: bool) -> None:
    """Rebuild a cluster's state from the log as it was at a point in time or of the log, with
    its jobs as they stood then (without --at or --seq: as it is now). The same point always
    prints the same output."""
    if at is not None and seq is not None:
        raise CliError("give --at or --seq, not both", EXIT_INVALID)
    when = parse_time(at).isoformat() if at is not None else None
    async with TrackerReads(bus) as tracker:
        state = await tracker.get("/v1/replay", cluster=cluster_ref, seq=seq, at=when)
    click.echo(json.dumps(state, indent=2, sort_keys=True) if as_json else render_replay(state))


def parse_time(text: str) -> datetime:
    """ISO 8601, or a time as the CLI shows them (`2026-12-01 01:43:39 UTC`: copied from its output)."""
    try:
        when = datetime.fromisoformat(text.removesuffix(" UTC"))
    except ValueError:
        raise CliError(f"time {text!r} is not ISO 8601 (e.g. 2026-05-01T12:00:00Z)", EXIT_INVALID) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


# -- events ------------------------------------------------------------------------------------------

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")


def parse_since(text: str, now: datetime) -> int | datetime:
    """A log sequence (`1234`), a time (ISO 8601) or an age (`30s`, `10m`, `2h`, `1d`)."""
    if text.isdigit():
        if len(text) > 18 or int(text) > LAST_SEQ:  # (the tracker's bound on `after`, said as the option)
            raise CliError(f"--since {text[:40]}: a log sequence is at most {LAST_SEQ}", EXIT_INVALID)
        return int(text)
    m = _DURATION.fullmatch(text)
    if m:
        return now - timedelta(seconds=float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)])
    try:
        return parse_time(text)
    except CliError:
        raise CliError(f"--since {text!r}: give a log sequence, an ISO 8601 time, or an age such as 10m", EXIT_INVALID) from None


def relative_subject(asked: str | None, pattern: str | None) -> tuple[str | None, str]:
    """(tenant, pattern under `muster.evt.<tenant>.`) of `--subject`: relative, or a whole
    `muster.evt.<tenant>.…` subject, which names the tenant."""
    if not pattern:
        return asked, ">"
    prefix = subjects.EVT + "."
    if pattern.startswith(prefix):
        tenant, _, rest = pattern[len(prefix):].partition(".")
        if not subjects.TOKEN.fullmatch(tenant) or not rest:
            raise CliError(f"--subject {pattern!r}: name one tenant and a pattern under it (muster.evt.<tenant>.job.*)", EXIT_INVALID)
        if asked is not None and asked != tenant:
            raise CliError(f"--subject {pattern!r} is in tenant {tenant}, not {asked}", EXIT_INVALID)
        return tenant, rest
    if pattern.startswith("muster."):
        raise CliError(f"--subject {pattern!r} is not in the log ({subjects.EVT}.>)", EXIT_INVALID)
    return asked, pattern


@click.command("events")
@click.option("--subject", "pattern", default=None,
              help="a subject pattern under the tenant (job.*, task.<job>.>, ...) or a whole muster.evt.<tenant>.… subject")
@click.option("--cluster", "cluster_ref", default=None, metavar="CLUSTER",
              help="a cluster's events and its jobs' (its id or name)")
@click.option("--since", default=None, help="from a log sequence, an ISO 8601 time, or an age (30s, 10m, 2h, 1d)")
@click.option("--follow", "-f", is_flag=True, help="keep printing new events as they are appended")
@bus_options
@following
async def events(pattern: str | None, cluster_ref: str | None, since: str | None, follow: bool, bus: Bus) -> None:
    """Dump (or tail, with --follow) the tenant's raw events as JSON lines, for scripts."""
    if pattern and cluster_ref:
        raise CliError("give --subject or --cluster, not both", EXIT_INVALID)
    start = parse_since(since, datetime.now(UTC)) if since else 1
    window: dict[str, Any] = {"after": max(start - 1, 0)} if isinstance(start, int) else {"since": start.isoformat()}
    if cluster_ref:
        tenant, selection = bus.asked, {"cluster": cluster_ref}
    else:
        tenant, relative = relative_subject(bus.asked, pattern)
        selection = {"subject": relative}
    if tenant is not None:
        _check(tenant, subjects.TOKEN.pattern, "tenant")
    async with TrackerReads(bus, tenant=tenant) as tracker:
        async for item in tracker.events(follow=follow, **selection | window):
            click.echo(json.dumps(item))
