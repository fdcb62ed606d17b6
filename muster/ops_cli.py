"""`muster cluster ...` and `muster job ...`: every operation for people (docs/client.md).

Each operation prints the planner's answer at once; `--wait` then follows the job's events
live until it ends (exit 0 if it succeeded, 1 otherwise); `--dry-run` prints the layout and the
plan and executes nothing; `--json` prints one JSON document per line for scripts. A cluster
is named by its id or its name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
import pydantic

from contracts.commands import (
    MAX_RELAYOUTS,
    AddServices,
    ApproveJob,
    CancelJob,
    Command,
    ConfigureCluster,
    CreateCluster,
    DeleteCluster,
    ExpandCluster,
    JobCommand,
    PauseJob,
    PoolWait,
    RejectJob,
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
from contracts.pools import Callback
from muster.help_group import WholeHelpGroup

from . import cluster_reads_cli, ops_care_cli
from .cli_bus import Bus, bus_options
from .cli_support import CliError, Duration, NodeCount, WholeNumber, command, job_id_of, json_option, parse_json_arg
from .ops_care_cli import parse_rolling as _rolling
from .ops_care_cli import rolling_options, seconds
from .ops_session import CAPTURE, Options, Session, chosen, cluster_op, create_op, job_op, out


def nodes_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """`--nodes n1,n2`: only these nodes' tasks; the desired state is recorded per node."""
    return click.option("--nodes", "nodes", multiple=True, metavar="N1,N2",
                        help="only on these nodes (ids as `muster cluster show` lists them; comma-separated or repeated; "
                             "default: every node)")(f)


def _total(nodes: int | None, delta: int | None, current: int, sign: int, verb: str) -> int:
    if (nodes is None) == (delta is None):
        raise CliError(f"{verb} needs exactly one of --nodes (the new total) and --{'add' if sign > 0 else 'remove'}")
    return nodes if nodes is not None else current + sign * (delta or 0)


# -- muster cluster ------------------------------------------------------------------------------


@click.group("cluster", cls=WholeHelpGroup)
def cluster() -> None:
    """Create, change and delete clusters; list and show them (from the log)."""


MAX_WAIT_S = 30 * 86400
"""`PoolWait.wait_s`'s bound, said by the option (it was "invalid request: wait_s: inf is over the limit")."""


def pool_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """How a create or expand on a pool provider waits for its hosts (docs/pools.md)."""
    f = click.option("--callback", default=None, metavar="URL|SUBJECT",
                     help="pool: told when the hosts are granted and when the job ends (an http(s) URL, or muster.cb.<tenant>.…)")(f)
    f = click.option("--wait-for-hosts", default=None, metavar="DURATION",
                     help="pool: fail the job if its hosts are not granted within this time (600, 90s, 10m, 2h, 7d; "
                          "at most 30 days)")(f)
    f = click.option("--urgency", type=WholeNumber(0, 1000), default=50, show_default=True,
                     help="pool: how urgent (the pool serves urgency x tenant priority first)")(f)
    return f


relayout_option = click.option(
    "--relayout", type=WholeNumber(0, MAX_RELAYOUTS), default=None, metavar="N",
    help="after a task fails past its retries (and the job is rolled back), try up to N other layouts "
         "(default: the template's administration.relayout)")


def wait_seconds(text: str | None) -> float | None:
    """`--wait-for-hosts` in seconds, as `--lease` is read (`600`, `10m`, `2h`): it took seconds
    only (`10m` was "not a valid float range"), and NaN and inf went to the planner and came back
    as "invalid request: wait_s: nan is over the limit" (session 33)."""
    if text is None:
        return None
    wait_s = seconds(text, "--wait-for-hosts")
    if not 0 < wait_s <= MAX_WAIT_S:
        raise CliError(f"--wait-for-hosts: {text!r} is {'no time' if wait_s == 0 else 'over 30 days'}: give more than 0 and at "
                       "most 30 days (e.g. 600, 10m, 2h, 7d)")
    return wait_s


def _pool_wait(urgency: int, wait_for_hosts: str | None, callback: str | None) -> PoolWait:
    wait_s = wait_seconds(wait_for_hosts)
    target = None
    if callback:
        try:
            target = Callback(url=callback) if "://" in callback else Callback(subject=callback)
        except pydantic.ValidationError:
            # (it said "invalid request: url: String should match pattern '^https?://[^\s@]+$'", naming no option)
            raise CliError(f"--callback: {callback!r} is neither an http(s) URL (https://host/path, no spaces or @) nor a "
                           "subject (muster.cb.<tenant>.…: letters, digits, '_', '-' and '.')") from None
    return PoolWait(urgency=urgency, wait_s=wait_s, callback=target)


@cluster.command("create")
@click.argument("name")
@click.option("--template", "-t", required=True, help="cluster template")
@click.option("--nodes", "-n", required=True, type=NodeCount(), help="number of nodes")
@click.option("--services", "-s", multiple=True, help="services (comma-separated or repeated; default: the template's)")
@click.option("--provider", default=None, help="provider for every node (default: the template's)")
@click.option("--hardwaretype", default=None, help="hardware type for every node")
@click.option("--imagetype", default=None, help="image type for every node")
@click.option("--config", "config_text", default=None, help="cluster config: JSON, or @FILE (JSON or YAML)")
@click.option("--lease", default=None, help="how long until the cluster is deleted (e.g. 2h, 7d): at most the template's lease; "
                                            "any, on a template without one (0: none)")
@relayout_option
@pool_options
@create_op
async def create(name: str, template: str, nodes: int, services: tuple[str, ...], provider: str | None,
                 hardwaretype: str | None, imagetype: str | None, config_text: str | None, lease: str | None,
                 relayout: int | None, urgency: int, wait_for_hosts: str | None, callback: str | None, opts: Options) -> None:
    """Create cluster NAME from a template."""
    config = parse_json_arg(config_text, "--config") if config_text else {}
    if not isinstance(config, dict):  # (as configure says it: the request's model said "Input should be a valid dictionary")
        raise CliError("--config must be a JSON object (in YAML, a mapping)")
    cmd = CreateCluster(name=name, template=template, nodes=nodes, services=chosen(services, "--services", "the template's services"), provider=provider,
                        hardwaretype=hardwaretype, imagetype=imagetype, config=config,
                        lease_s=seconds(lease, "--lease") if lease else None, relayout=relayout,
                        pool=_pool_wait(urgency, wait_for_hosts, callback))
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
@click.option("--nodes", "-n", type=NodeCount(), default=None, help="the new total")
@click.option("--add", type=NodeCount(), default=None, help="how many nodes to add")
@relayout_option
@pool_options
@cluster_op
async def expand(cluster_ref: str, nodes: int | None, add: int | None, relayout: int | None, urgency: int,
                 wait_for_hosts: str | None, callback: str | None, opts: Options) -> None:
    """Add nodes to CLUSTER (existing nodes are not touched)."""
    async with Session(opts) as s:
        c = await s.cluster(cluster_ref)
        await s.execute(ExpandCluster(cluster_id=c.id, nodes=_total(nodes, add, len(c.nodes), +1, "expand"), relayout=relayout,
                                      pool=_pool_wait(urgency, wait_for_hosts, callback)))
        await _say_stale(s, c.id)


@cluster.command("shrink")
@click.argument("cluster_ref", metavar="CLUSTER")
@click.option("--nodes", "-n", type=NodeCount(), default=None, help="the new total")
@click.option("--remove", type=NodeCount(), default=None, help="how many nodes to remove")
@cluster_op
async def shrink(cluster_ref: str, nodes: int | None, remove: int | None, opts: Options) -> None:
    """Remove nodes from CLUSTER."""
    async with Session(opts) as s:
        c = await s.cluster(cluster_ref)
        total = _total(nodes, remove, len(c.nodes), -1, "shrink")
        if total < 1:
            raise CliError(f"cluster {c.name!r} has {len(c.nodes)} nodes; it cannot shrink by {remove}")
        await s.execute(ShrinkCluster(cluster_id=c.id, nodes=total))
        await _say_stale(s, c.id)


async def _say_stale(s: Session, cluster_id: str) -> None:
    """After a waited expand or shrink: the nodes whose configs name the members of before (the
    drift's `stale`), and the two ways to write them, so nobody has to know to look."""
    if not s.opts.wait or s.opts.as_json:
        return
    c = await s.cluster(cluster_id, "read")
    stale = sorted({d.node for d in c.drift if d.observed == "stale"})
    if stale:
        shown = ", ".join(stale[:5]) + (f" and {len(stale) - 5} more" if len(stale) > 5 else "")
        out.print(f"stale: the config of {len(stale)} node(s) ({shown}) names the members before this change: "
                  f"`muster cluster repair {c.name}` writes them and restarts their services, "
                  f"`muster cluster repair {c.name} --rolling 1` does it a node at a time")


@cluster.command("configure")
@click.argument("cluster_ref", metavar="CLUSTER")
@click.argument("config_text", metavar="[CONFIG]", required=False)
@click.option("--config", "config_option", default=None, metavar="CONFIG",
              help="CONFIG given as `cluster create --config` takes it (the same as the argument)")
@click.option("--restart", is_flag=True, help="stop and start the services around the change")
@rolling_options
@nodes_option
@cluster_op
async def configure(cluster_ref: str, config_text: str | None, config_option: str | None, restart: bool,
                    rolling: str | None, tolerate: int, nodes: tuple[str, ...], opts: Options) -> None:
    """Replace CLUSTER's config with CONFIG (JSON, or @FILE with JSON or YAML). Without CONFIG,
    its config again, its macros expanded anew: after an expand, the old nodes learn the new
    peers (refused if the cluster changed since it was read)."""
    if config_text is not None and config_option is not None:
        raise CliError("CONFIG is given twice (as the argument and as --config): give it once")
    # `cluster create` takes --config: someone coming from it typed it here too.
    config_text = config_option if config_text is None else config_text
    config = None
    if config_text is None and CAPTURE.get() is not None:
        raise CliError("a scheduled configure needs its CONFIG: the cluster's config of today would be frozen into it")
    if config_text is not None:
        config = parse_json_arg(config_text, "CONFIG")
        if not isinstance(config, dict):
            raise CliError("CONFIG must be a JSON object (in YAML, a mapping)")
    spec = _rolling(rolling, tolerate)
    async with Session(opts) as s:
        info = await s.cluster(cluster_ref)
        again = {"config": info.config, "if_version": info.version} if config is None else {"config": config}
        await s.execute(ConfigureCluster(cluster_id=info.id, restart=restart, rolling=spec, nodes=chosen(nodes, "--nodes", "every node"),
                                         **again))


def _services_operation(name: str, model: Callable[..., Command], doc: str, required: bool = False, picks: bool = False) -> None:
    @cluster.command(name, help=doc)
    @click.argument("cluster_ref", metavar="CLUSTER")
    @click.argument("services", nargs=-1, required=required)
    @cluster_op
    async def operation(cluster_ref: str, services: tuple[str, ...], opts: Options, nodes: tuple[str, ...] = ()) -> None:
        picked = {"nodes": chosen(nodes, "--nodes", "every node")} if picks else {}
        async with Session(opts) as s:
            await s.execute(model(cluster_id=(await s.cluster(cluster_ref)).id, services=chosen(services, "SERVICES", "" if required else "all of them"), **picked))

    if picks:
        nodes_option(operation)


@cluster.command("restart")
@click.argument("cluster_ref", metavar="CLUSTER")
@click.argument("services", nargs=-1)
@rolling_options
@nodes_option
@cluster_op
async def restart(cluster_ref: str, services: tuple[str, ...], rolling: str | None, tolerate: int, nodes: tuple[str, ...],
                  opts: Options) -> None:
    """Restart SERVICES on CLUSTER (default: all) and what depends on them. A service stopped
    with `cluster stop` stays stopped unless it is named (the answer says which)."""
    spec = _rolling(rolling, tolerate)
    async with Session(opts) as s:
        await s.execute(RestartServices(cluster_id=(await s.cluster(cluster_ref)).id, services=chosen(services, "SERVICES", "all of them"),
                                        rolling=spec, nodes=chosen(nodes, "--nodes", "every node")))


_services_operation("add-services", AddServices, "Add SERVICES to CLUSTER (the solver places them).", required=True)
_services_operation("remove-services", RemoveServices, "Stop and remove SERVICES from CLUSTER.", required=True)
_services_operation("start", StartServices, "Start SERVICES on CLUSTER (default: all; --nodes: on those nodes only) and what "
                    "they depend on.", picks=True)
_services_operation("stop", StopServices, "Stop SERVICES on CLUSTER (default: all; --nodes: on those nodes only) and what "
                    "depends on them; they are meant to stay stopped there (drift, repair).", picks=True)


@cluster.command("upgrade")
@click.argument("cluster_ref", metavar="CLUSTER")
@click.argument("service")
@rolling_options
@cluster_op
async def upgrade(cluster_ref: str, service: str, rolling: str | None, tolerate: int, opts: Options) -> None:
    """Run SERVICE's current catalog definition on its nodes (stop, install, configure, start)."""
    spec = _rolling(rolling, tolerate)
    async with Session(opts) as s:
        await s.execute(UpgradeService(cluster_id=(await s.cluster(cluster_ref)).id, service=service, rolling=spec))


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


for _more in (*ops_care_cli.COMMANDS, *cluster_reads_cli.COMMANDS):  # apply, extend-lease, check, repair, drift; list, show, cost
    cluster.add_command(_more)


# -- muster job -----------------------------------------------------------------------------------


@click.group("job", cls=WholeHelpGroup)
def job() -> None:
    """Control a job: pause, resume, cancel, retry; approve or reject one that waits; wait for one; list them."""


def _job_control(name: str, model: type[JobCommand], doc: str) -> None:
    @job.command(name, help=doc)
    @click.argument("job_id", required=False, metavar="JOB_ID")  # (missing: job_id_of says where jobs are listed)
    @job_op
    async def control(job_id: str | None, opts: Options) -> None:
        command = model(job_id=job_id_of(job_id, f"muster job {name}"))
        async with Session(opts) as s:
            await s.execute(command)


_job_control("pause", PauseJob, "Dispatch nothing new for JOB_ID (tasks in flight finish); --wait until it is paused.")
_job_control("resume", ResumeJob, "Resume a paused job.")
_job_control("cancel", CancelJob, "Stop JOB_ID and roll back what it did.")
_job_control("retry", RetryJob, "Run a failed or rolled-back job's plan again; a job that needs attention "
             "(its rollback failed) runs its rollback's failed tasks again.")


def _decision(name: str, model: type[ApproveJob | RejectJob], doc: str) -> None:
    @click.argument("job_id", required=False, metavar="JOB_ID")
    @click.option("--comment", "-m", default="", help="why (recorded with the decision)")
    @job_op
    async def decide(job_id: str | None, comment: str, opts: Options) -> None:
        command = model(job_id=job_id_of(job_id, f"muster job {name}"), comment=comment)
        async with Session(opts) as s:
            await s.execute(command)

    if model is ApproveJob:
        decide = click.option("--dry-run", is_flag=True, help=(
            "decide nothing: show what an approval now would find (the plan, its cost at today's prices, what the "
            "tenant's policies say now)"))(decide)
    job.command(name, help=doc)(decide)


_decision("approve", ApproveJob, "Let JOB_ID, which waits for approval, run its plan (docs/governance.md).")
_decision("reject", RejectJob, "Refuse JOB_ID, which waits for approval: it ends, nothing ran.")


for _read in cluster_reads_cli.JOB_COMMANDS:  # list
    job.add_command(_read)


@job.command("wait")
@click.argument("job_id", required=False, metavar="JOB_ID")
@click.option("--timeout", default=3600.0, show_default=True, type=Duration(),
              help="how long to wait at most, then exit 3 (seconds, or 90s, 10m, 2h)")
@_read_options
@command
async def wait(job_id: str | None, timeout: float, bus: Bus, as_json: bool) -> None:
    """Follow JOB_ID live until it ends (from its first event); exit 0 if it succeeded."""
    job_id = job_id_of(job_id, "muster job wait")
    opts = Options(bus, True, as_json, None, None, timeout)
    async with Session(opts) as s:
        await s.follow(job_id, "job")

