"""`muster cluster ...` and `muster job ...`: every operation for people (docs/client.md).

Each operation prints the planner's answer at once; `--wait` then follows the job's events
live until it ends (exit 0 if it succeeded, 1 otherwise); `--dry-run` prints the layout and the
plan and executes nothing; `--json` prints one JSON document per line for scripts. A cluster
is named by its id or its name.
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from contracts.events import FINAL_JOB_EVENTS
from contracts.commands import (
    VERB_OF,
    Accepted,
    AddServices,
    CancelJob,
    Command,
    ConfigureCluster,
    CreateCluster,
    DeleteCluster,
    DryRun,
    ExpandCluster,
    JobCommand,
    PauseJob,
    Rejected,
    RemoveServices,
    RestartServices,
    ResumeJob,
    RetryJob,
    RollbackCluster,
    ShrinkCluster,
    StartServices,
    StopServices,
    UpgradeService,
)

from .cli_support import (
    EXIT_FAILED,
    EXIT_INVALID,
    CliError,
    bus_options,
    command,
    echo_json,
    json_option,
    open_client,
    parse_json_arg,
    resolve_nats_url,
)
from .client import ClusterInfo, MusterClient, MusterError, new_request_id
from .readmodel.progress import JobProgress

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

WAIT_UNTIL: dict[str, frozenset[str]] = {"pause": frozenset({"JobPaused", *FINAL_JOB_EVENTS})}
"""What `--wait` waits for, when it is not the end of the job."""


@dataclass
class Options:
    tenant: str
    nats_server: str | None
    data_dir: Path
    wait: bool
    as_json: bool
    request_id: str | None
    by: str | None
    timeout: float
    dry_run: bool = False


def _op_options(dry_run: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        async def wrapper(*args: Any, tenant: str, nats_server: str | None, data_dir: Path, wait: bool, as_json: bool,
                          request_id: str | None, by: str | None, timeout: float, **kwargs: Any) -> Any:
            opts = Options(tenant, nats_server, data_dir, wait, as_json, request_id, by, timeout,
                           kwargs.pop("dry_run", False))
            return await f(*args, opts=opts, **kwargs)

        g: Any = command(wrapper)
        if dry_run:
            g = click.option("--dry-run", is_flag=True, help="print the layout and the plan; execute nothing")(g)
        g = click.option("--timeout", default=3600.0, show_default=True, type=click.FloatRange(0.1),
                         help="seconds --wait waits at most")(g)
        g = click.option("--by", default=None, help="who asks (recorded in the log; default: your user name)")(g)
        g = click.option("--request-id", default=None,
                         help="idempotency key: the same key always maps to the same job (default: a new one)")(g)
        g = json_option(g)
        g = click.option("--wait", is_flag=True, help="follow the job live until it ends; exit 0 if it succeeded, 1 if not")(g)
        return bus_options(g)

    return decorate


cluster_op = _op_options(dry_run=True)
job_op = _op_options(dry_run=False)


class Session:
    """One command's connection and how it reports."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.client: MusterClient | None = None

    async def __aenter__(self) -> "Session":
        self.client = await open_client(resolve_nats_url(self.opts.nats_server, self.opts.data_dir), self.opts.tenant,
                                        requested_by=self.opts.by)
        return self

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        assert self.client is not None
        await self.client.__aexit__(t, e, tb)

    @property
    def c(self) -> MusterClient:
        assert self.client is not None
        return self.client

    async def cluster(self, ref: str) -> ClusterInfo:
        try:
            return await self.c.cluster(ref)
        except MusterError as e:
            raise CliError(str(e)) from None

    def stamp(self, cmd: Command) -> Command:
        update: dict[str, Any] = {"request_id": self.opts.request_id or new_request_id(), "requested_by": self.c.requested_by}
        if "dry_run" in type(cmd).model_fields:
            update["dry_run"] = self.opts.dry_run
        return cmd.model_copy(update=update)

    async def execute(self, cmd: Command) -> None:
        cmd = self.stamp(cmd)
        verb = VERB_OF[cmd.type]  # type: ignore[attr-defined]
        since = 0
        if isinstance(cmd, JobCommand) and self.opts.wait:
            since = await self.c.job_seq(cmd.job_id)
        reply = await self.c.request(cmd)
        if self.opts.as_json:
            echo_json(reply.model_dump(mode="json"))
        if isinstance(reply, Rejected):
            raise CliError(f"{verb} rejected: {reply.reason}", EXIT_INVALID)
        if isinstance(reply, DryRun):
            if not self.opts.as_json:
                print_dry_run(verb, reply)
            return
        if not self.opts.as_json:
            dup = " (a repeat of an earlier request: same job)" if reply.duplicate else ""
            out.print(f"{verb} accepted: job {reply.job_id}, cluster {reply.cluster_id}{dup}")
        if self.opts.wait:
            await self.follow(reply.job_id, verb, since)

    async def follow(self, job_id: str, title: str, since: int = 0) -> None:
        until = WAIT_UNTIL.get(title, frozenset(FINAL_JOB_EVENTS))
        final = await follow(self.c, job_id, title, since, until, self.opts.timeout, quiet=self.opts.as_json)
        if self.opts.as_json:
            echo_json(final.model_dump(mode="json"))
        if final.type not in ("JobSucceeded", "JobPaused"):
            raise CliError(describe_end(job_id, final), EXIT_FAILED)
        if not self.opts.as_json:
            out.print(describe_end(job_id, final))


def describe_end(job_id: str, final: Any) -> str:
    words = {"JobSucceeded": "succeeded", "JobFailed": "failed", "JobRolledBack": "was rolled back",
             "JobNeedsAttention": "needs an administrator's attention", "JobPaused": "is paused"}
    reason = getattr(final, "reason", "")
    return f"job {job_id} {words.get(final.type, final.type)}" + (f": {reason}" if reason else "")


async def follow(client: MusterClient, job_id: str, title: str, since: int, until: Iterable[str], timeout: float,
                 quiet: bool = False) -> Any:
    """Live progress of a job from its events (stderr), folded by the read model's
    JobProgress; returns the event that ended the wait."""
    final: Any = None
    stop = frozenset(until)
    progress = JobProgress()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=False, disable=quiet) as bars:
        bar = bars.add_task(f"{title}: waiting", total=None)
        async with asyncio.timeout(timeout):
            async for recorded in client.events(job_id, since_seq=since, until=stop):
                step = progress.apply(recorded)
                stages = progress.stage_progress()  # of the plan being run: forward, or the rollback
                total = sum(s["total"] for s in stages)
                bars.update(bar, total=total or None, completed=sum(s["done"] for s in stages),
                            description=f"{title}: {step['text']}"[:120])
                if recorded.type in stop:
                    final = recorded.event
    return final


def print_dry_run(verb: str, reply: DryRun) -> None:
    out.print(f"dry run of {verb}: nothing was executed or recorded")
    if reply.layout is not None:
        table = Table(title=f"layout: {reply.layout.nodes} nodes")
        for col in ("count", "hardware", "image", "services"):
            table.add_column(col)
        for g in reply.layout.layout:
            table.add_row(str(g.count), g.hardwaretype, g.imagetype, ", ".join(g.services))
        out.print(table)
    tasks = {t["id"]: t for t in reply.plan.get("tasks", [])}
    stages = reply.plan.get("stages", [])
    out.print(f"plan: {len(tasks)} tasks in {len(stages)} stages")
    for i, stage in enumerate(stages, start=1):
        counts = Counter(tasks[t]["action"] for t in stage if t in tasks)
        out.print(f"  stage {i}: " + ", ".join(f"{n}× {a}" for a, n in counts.items()))


def _services(values: Iterable[str]) -> list[str]:
    return [s for v in values for s in v.split(",") if s]


def _total(nodes: int | None, delta: int | None, current: int, sign: int, verb: str) -> int:
    if (nodes is None) == (delta is None):
        raise CliError(f"{verb} needs exactly one of --nodes (the new total) and --{'add' if sign > 0 else 'remove'}")
    return nodes if nodes is not None else current + sign * (delta or 0)


# -- muster cluster ------------------------------------------------------------------------------


@click.group("cluster")
def cluster() -> None:
    """Create, change and delete clusters; list and show them (from the log)."""


@cluster.command("create")
@click.argument("name")
@click.option("--template", "-t", required=True, help="cluster template")
@click.option("--nodes", "-n", required=True, type=click.IntRange(1), help="number of nodes")
@click.option("--services", "-s", multiple=True, help="services (comma-separated or repeated; default: the template's)")
@click.option("--provider", default=None)
@click.option("--hardwaretype", default=None, help="hardware type for every node")
@click.option("--imagetype", default=None, help="image type for every node")
@click.option("--config", "config_text", default=None, help="cluster config: JSON, or @FILE (JSON or YAML)")
@cluster_op
async def create(name: str, template: str, nodes: int, services: tuple[str, ...], provider: str | None,
                 hardwaretype: str | None, imagetype: str | None, config_text: str | None, opts: Options) -> None:
    """Create cluster NAME from a template."""
    config = parse_json_arg(config_text, "--config") if config_text else {}
    cmd = CreateCluster(name=name, template=template, nodes=nodes, services=_services(services) or None, provider=provider,
                        hardwaretype=hardwaretype, imagetype=imagetype, config=config)
    async with Session(opts) as s:
        await s.execute(cmd)


@cluster.command("delete")
@click.argument("cluster_ref", metavar="CLUSTER")
@cluster_op
async def delete(cluster_ref: str, opts: Options) -> None:
    """Delete every node of CLUSTER."""
    async with Session(opts) as s:
        await s.execute(DeleteCluster(cluster_id=(await s.cluster(cluster_ref)).id))


@cluster.command("expand")
@click.argument("cluster_ref", metavar="CLUSTER")
@click.option("--nodes", type=click.IntRange(1), default=None, help="the new total")
@click.option("--add", type=click.IntRange(1), default=None, help="how many nodes to add")
@cluster_op
async def expand(cluster_ref: str, nodes: int | None, add: int | None, opts: Options) -> None:
    """Add nodes to CLUSTER (existing nodes are not touched)."""
    async with Session(opts) as s:
        c = await s.cluster(cluster_ref)
        await s.execute(ExpandCluster(cluster_id=c.id, nodes=_total(nodes, add, len(c.nodes), +1, "expand")))


@cluster.command("shrink")
@click.argument("cluster_ref", metavar="CLUSTER")
@click.option("--nodes", type=click.IntRange(1), default=None, help="the new total")
@click.option("--remove", type=click.IntRange(1), default=None, help="how many nodes to remove")
@cluster_op
async def shrink(cluster_ref: str, nodes: int | None, remove: int | None, opts: Options) -> None:
    """Remove nodes from CLUSTER."""
    async with Session(opts) as s:
        c = await s.cluster(cluster_ref)
        total = _total(nodes, remove, len(c.nodes), -1, "shrink")
        if total < 1:
            raise CliError(f"cluster {c.name!r} has {len(c.nodes)} nodes; it cannot shrink by {remove}")
        await s.execute(ShrinkCluster(cluster_id=c.id, nodes=total))


@cluster.command("configure")
@click.argument("cluster_ref", metavar="CLUSTER")
@click.argument("config_text", metavar="CONFIG")
@click.option("--restart", is_flag=True, help="stop and start the services around the change")
@cluster_op
async def configure(cluster_ref: str, config_text: str, restart: bool, opts: Options) -> None:
    """Replace CLUSTER's config with CONFIG (JSON, or @FILE with JSON or YAML)."""
    config = parse_json_arg(config_text, "CONFIG")
    if not isinstance(config, dict):
        raise CliError("CONFIG must be a JSON object")
    async with Session(opts) as s:
        await s.execute(ConfigureCluster(cluster_id=(await s.cluster(cluster_ref)).id, config=config, restart=restart))


def _services_operation(name: str, model: type[Command], doc: str, required: bool = False) -> None:
    @cluster.command(name, help=doc)
    @click.argument("cluster_ref", metavar="CLUSTER")
    @click.argument("services", nargs=-1, required=required)
    @cluster_op
    async def operation(cluster_ref: str, services: tuple[str, ...], opts: Options) -> None:
        async with Session(opts) as s:
            await s.execute(model(cluster_id=(await s.cluster(cluster_ref)).id, services=_services(services) or None))


_services_operation("add-services", AddServices, "Add SERVICES to CLUSTER (the solver places them).", required=True)
_services_operation("remove-services", RemoveServices, "Stop and remove SERVICES from CLUSTER.", required=True)
_services_operation("start", StartServices, "Start SERVICES on CLUSTER (default: all) and what they depend on.")
_services_operation("stop", StopServices, "Stop SERVICES on CLUSTER (default: all) and what depends on them.")
_services_operation("restart", RestartServices, "Restart SERVICES on CLUSTER (default: all) and what depends on them.")


@cluster.command("upgrade")
@click.argument("cluster_ref", metavar="CLUSTER")
@click.argument("service")
@cluster_op
async def upgrade(cluster_ref: str, service: str, opts: Options) -> None:
    """Run SERVICE's current catalog definition on its nodes (stop, install, configure, start)."""
    async with Session(opts) as s:
        await s.execute(UpgradeService(cluster_id=(await s.cluster(cluster_ref)).id, service=service))


@cluster.command("rollback")
@click.argument("cluster_ref", metavar="CLUSTER")
@click.option("--to-job", required=True, help="bring the cluster back to how it was before this job")
@cluster_op
async def rollback(cluster_ref: str, to_job: str, opts: Options) -> None:
    """Bring CLUSTER back to its layout and config before a job."""
    async with Session(opts) as s:
        await s.execute(RollbackCluster(cluster_id=(await s.cluster(cluster_ref)).id, to_job=to_job))


def _read_options(f: Callable[..., Any]) -> Callable[..., Any]:
    return bus_options(json_option(f))


@cluster.command("list")
@click.option("--all", "show_all", is_flag=True, help="deleted clusters too")
@_read_options
@command
async def list_clusters(show_all: bool, tenant: str, nats_server: str | None, data_dir: Path, as_json: bool) -> None:
    """The tenant's clusters, from the log."""
    async with await open_client(resolve_nats_url(nats_server, data_dir), tenant) as client:
        clusters = [c for c in await client.clusters() if show_all or c.status != "deleted"]
    if as_json:
        echo_json([{k: v for k, v in c.to_json().items() if k not in ("nodes", "config")} | {"nodes": len(c.nodes)}
                   for c in clusters])
        return
    table = Table(title=f"clusters of tenant {tenant!r}")
    for col in ("name", "id", "status", "template", "nodes", "services", "last job"):
        table.add_column(col)
    for c in clusters:
        table.add_row(c.name, c.id, c.status, c.template, str(len(c.nodes)), ", ".join(c.services), c.job_id)
    out.print(table if clusters else f"no clusters in tenant {tenant!r}")


@cluster.command("show")
@click.argument("cluster_ref", metavar="CLUSTER")
@_read_options
@command
async def show(cluster_ref: str, tenant: str, nats_server: str | None, data_dir: Path, as_json: bool) -> None:
    """One cluster: status, template, config, every node."""
    async with await open_client(resolve_nats_url(nats_server, data_dir), tenant) as client:
        try:
            c = await client.cluster(cluster_ref)
        except MusterError as e:
            raise CliError(str(e)) from None
    data = c.to_json()
    if as_json:
        echo_json(data)
        return
    status = c.status + (f" ({c.status_reason})" if c.status_reason else "")
    for label, value in (("cluster", f"{c.name} ({c.id})"), ("status", status), ("template", c.template),
                         ("provider", c.provider), ("last job", c.job_id), ("services", ", ".join(c.services)),
                         ("config", str(c.config))):
        out.print(f"{label:>9}: {value}")
    table = Table(title=f"{len(c.nodes)} nodes")
    for col in ("node", "hostname", "hardware", "image", "address", "services"):
        table.add_column(col)
    for n in data["nodes"]:
        table.add_row(n["id"], n["hostname"], n["hardwaretype"], n["imagetype"],
                      ", ".join(n["ipaddresses"].values()), ", ".join(n["services"]))
    out.print(table)


# -- muster job -----------------------------------------------------------------------------------


@click.group("job")
def job() -> None:
    """Control a running job: pause, resume, cancel, retry; wait for one."""


def _job_control(name: str, model: type[JobCommand], doc: str) -> None:
    @job.command(name, help=doc)
    @click.argument("job_id")
    @job_op
    async def control(job_id: str, opts: Options) -> None:
        async with Session(opts) as s:
            await s.execute(model(job_id=job_id))


_job_control("pause", PauseJob, "Dispatch nothing new for JOB_ID (tasks in flight finish); --wait until it is paused.")
_job_control("resume", ResumeJob, "Resume a paused job.")
_job_control("cancel", CancelJob, "Stop JOB_ID and roll back what it did.")
_job_control("retry", RetryJob, "Run a failed job's remaining tasks again.")


@job.command("wait")
@click.argument("job_id")
@click.option("--timeout", default=3600.0, show_default=True, type=click.FloatRange(0.1))
@_read_options
@command
async def wait(job_id: str, timeout: float, tenant: str, nats_server: str | None, data_dir: Path, as_json: bool) -> None:
    """Follow JOB_ID live until it ends (from its first event); exit 0 if it succeeded."""
    opts = Options(tenant, nats_server, data_dir, True, as_json, None, None, timeout)
    async with Session(opts) as s:
        if not await s.c.job_seq(job_id):
            raise CliError(f"no job {job_id!r} in tenant {tenant!r}")
        await s.follow(job_id, "job")

