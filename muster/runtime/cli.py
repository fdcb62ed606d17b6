"""`muster up` and `muster demo`: the embedded deployment."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Coroutine
from importlib import resources
from pathlib import Path
from typing import Any

import aiohttp
import click
from rich.console import Console

from contracts.catalog import Catalog
from contracts.commands import Accepted, CreateCluster, DeleteCluster, Rejected
from contracts.events import FINAL_JOB_EVENTS, JobSucceeded
from contracts.identity import tenant_name_problem
from muster import tracing
from muster.bus.connect import bearer_headers, principal_of
from muster.bus.eventstore import EventStore
from muster.bus.server import DataDirBusy, ServerError
from muster.catalog.files import CatalogFileError, load_catalog
from muster.catalog.store import apply_catalog
from muster.cli_bus import bus_errors  # noqa: F401 - registers how the bus's errors read
from muster.cli_support import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_UNREACHABLE,
    CliError,
    Duration,
    FilePath,
    WholeNumber,
    run,
    translates,
)
from muster.client import MusterClient
from muster.destinations import ALLOW_ENV, ALLOW_OPTION, DOC, Allowed, AllowError
from muster.ops_session import follow
from muster.tables import Output, print_rows
from muster.tls.context import CA_ENV, CERT_ENV, CLIENT_CERT, CLIENT_KEY, KEY_ENV, TlsError, http_connector, http_ssl
from services.planner.domain.limits import parse_tenant_limits
from services.provisioner.plugins.specs import catalog_plugins

from .autoscale import AutoscalePolicy, autoscaling
from .down import DownError, stop_deployment
from .network import Network, network_options
from .reload import RELOAD_SIGNAL, allow_file_args, notifier_files
from .supervisor import Deployment, StartError, StartRefused, local_principal, tenant_names

console = Output(highlight=False, soft_wrap=True, markup=False)
"""Plain text a line at a time, as `muster`'s other commands print: a line is not cut at 80
columns in a pipe, and a job's error is shown as it is (not read as markup)."""
DEMO_CATALOG = Path(str(resources.files("muster.demo") / "catalog"))
DEMO_TIMEOUT_S = 600.0
TRACKER_ANSWER_S = 10.0
"""The demo's own read of its job from the tracker, whole (the tracker answers it in
milliseconds; the CLI's reads wait as long for an answer's start: muster.tracker_client.ANSWER_S)."""


def _data_dir_option(f: Any) -> Any:
    return click.option(
        "--data-dir", type=FilePath(file_okay=False, path_type=Path), default=Path(".muster"), show_default=True,
        envvar="MUSTER_DATA_DIR", help="where nats-server keeps its store and the services their logs ($MUSTER_DATA_DIR)",
    )(f)


def read_catalog(path: Path) -> Catalog:
    """`--catalog`: a Coopr folder or a file of entities (YAML or JSON), as `muster catalog apply`
    reads them, read before anything starts (a folder holding only catalog.yaml, such as
    examples/catalog-real, was refused once every process had started, and the deployment stopped)."""
    try:
        return load_catalog(path)
    except CatalogFileError as err:
        raise CliError(f"{str(err).replace('is read too: ', 'is read too: --catalog ')} (`muster catalog validate {path}` "
                       "lists every problem)", EXIT_INVALID) from None


async def _load_catalog(client: MusterClient, tenant: str, catalog: Catalog, source: Path) -> int:
    try:
        return await apply_catalog(EventStore(client.nc), tenant, catalog, by=principal_of(client.nc), plugins=catalog_plugins())
    except CatalogFileError as err:  # (CatalogRejected is one: it read as an internal error)
        raise CliError(f"{err} (`muster catalog validate {source}` lists every problem)", EXIT_INVALID) from None


def _checked_tenants(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """`up --tenant default,acme`: a name the auth service would refuse is named here, before
    anything starts (it stopped the auth service at start, its log naming it)."""
    for name in tenant_names(value) or ("",):
        _checked_tenant(_ctx, _param, name)
    return value


def _checked_tenant(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """`demo --tenant acme`: one name, as `_checked_tenants` checks each."""
    if problem := tenant_name_problem(value):
        raise click.BadParameter(problem)
    return value


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
STOPPING = {signal.SIGINT: "interrupted; stopping.", signal.SIGTERM: "stopping (asked by muster down / SIGTERM).",
            signal.SIGHUP: "the terminal closed (SIGHUP); stopping."}
"""What `muster up` says as it stops, by the signal: Ctrl-C is an interruption, `muster down`
(SIGTERM) was asked for."""


async def _guarded(deployment: Deployment, work: Any = None) -> Any:
    """Run `work` (or nothing) until it ends, a signal arrives, or the deployment fails;
    SIGINT, SIGTERM and SIGHUP (a closed terminal) are handled here so a clean stop never
    depends on how we were started (a background job starts with SIGINT ignored). SIGUSR1
    rotates the server certificates (`muster tls rotate`); SIGUSR2 has the notifiers read their
    secrets and allow files again (`muster reload`)."""
    stop = asyncio.Event()
    received: list[signal.Signals] = []
    loop = asyncio.get_running_loop()

    def stopped_by(sig: signal.Signals) -> None:
        received.append(sig)
        stop.set()

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stopped_by, sig)
    rotations: set[asyncio.Task[None]] = set()
    loop.add_signal_handler(signal.SIGUSR1, lambda: _rotate_in_background(deployment, rotations))
    loop.add_signal_handler(RELOAD_SIGNAL, lambda: _reload_in_background(deployment, rotations))
    if deployment.tls is not None and deployment.tls.issuing:  # (an operator's certificates are the operator's to renew)
        renewing = asyncio.create_task(_renew_when_due(deployment))
        rotations.add(renewing)
    waits: dict[str, asyncio.Future[Any]] = {
        "failed": asyncio.ensure_future(deployment.wait_failed()),
        "signal": asyncio.ensure_future(stop.wait()),
    }
    if work is not None:
        waits["work"] = asyncio.ensure_future(work)
    try:
        done, _ = await asyncio.wait(waits.values(), return_when=asyncio.FIRST_COMPLETED)
        if waits["failed"] in done:
            raise CliError(waits["failed"].result(), EXIT_FAILED)
        if waits["signal"] in done:
            console.print(STOPPING[received[0]])
            return None
        return waits["work"].result()
    finally:
        for f in [*waits.values(), *rotations]:
            f.cancel()
        await asyncio.gather(*waits.values(), *rotations, return_exceptions=True)
        for sig in (*STOP_SIGNALS, signal.SIGUSR1, RELOAD_SIGNAL):
            loop.remove_signal_handler(sig)


async def _stoppable(work: Coroutine[Any, Any, None]) -> None:
    """Run `muster up`'s or `demo`'s `work`, a SIGTERM before `_guarded` holds the stop signals
    (`muster down` while it starts) ending it as Ctrl-C would: `work` is cancelled and its
    `finally` stops what had started (Python's default for SIGTERM ends the process on the spot)."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(work)
    asked: list[bool] = []

    def stop() -> None:
        console.print(STOPPING[signal.SIGTERM])
        asked.append(True)
        task.cancel()

    loop.add_signal_handler(signal.SIGTERM, stop)
    try:
        await task
    except asyncio.CancelledError:
        if not asked:
            raise
        raise CliError("stopped while starting", EXIT_INTERRUPTED) from None
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def _rotate_in_background(deployment: Deployment, running: set[asyncio.Task[None]]) -> None:
    async def rotate() -> None:
        try:
            reloaded = await deployment.rotate_certificates()
        except (StartError, ServerError, OSError, TlsError) as err:
            _say(f"certificates not rotated: {err}")
            return
        _say(f"certificates rotated: new server certificates loaded by {', '.join(reloaded)}")

    task = asyncio.create_task(rotate())
    running.add(task)
    task.add_done_callback(running.discard)


def _reload_in_background(deployment: Deployment, running: set[asyncio.Task[None]]) -> None:
    """`muster reload`: the notifiers read their secrets and allow files again, the pool service
    and the planners their allow file."""
    async def reload() -> None:
        try:
            said = await deployment.reload_settings()
        except StartError as err:
            _say(f"not reloaded: {err}")
            return
        console.print(f"reload: {'; '.join(said) or 'no notifier, pool service or planner runs'}", soft_wrap=True, markup=False, highlight=False)
        sys.stdout.flush()

    task = asyncio.create_task(reload())
    running.add(task)
    task.add_done_callback(running.discard)


RENEWAL_RETRY_S = 3600.0


async def _renew_when_due(deployment: Deployment) -> None:
    """Rotate the server certificates when they come within 30 days of their end, as a start
    would: they last 90 days, and a deployment that runs longer would stop taking new
    connections when they end (`muster tls rotate` does the same on demand). A timer to that
    moment, not a poll; the 30 days also cover the event loop's clock, which stops while the
    machine sleeps."""
    assert deployment.tls is not None
    while True:  # one renewal per pass, each at its own due time
        await asyncio.sleep(deployment.tls.renewal_in())
        try:
            reloaded = await deployment.rotate_certificates()
        except (StartError, ServerError, OSError, ValueError, TlsError) as err:  # (ValueError: a CA file that does not load)
            _say(f"certificates near their end not renewed: {err}; trying again in {RENEWAL_RETRY_S / 3600:g} h "
                 "(or run `muster tls rotate`)")
            await asyncio.sleep(RENEWAL_RETRY_S)
            continue
        _say(f"certificates renewed before their end: new server certificates loaded by {', '.join(reloaded)}")


def _checked_tenant_limits(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    """Refused here, named, rather than by each planner as it starts (a child that exits at once)."""
    try:
        parse_tenant_limits(values)
    except ValueError as err:
        raise click.BadParameter(str(err)) from None
    return values


def _checked_webhook_allow(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    """Refused here, named, rather than by the notifier and the pool service as they start."""
    try:
        Allowed.parse(values)
    except AllowError as err:
        raise click.BadParameter(str(err)) from None
    return values


@click.command("up")
@_data_dir_option
@click.option("--tracker-port", default=8080, show_default=True, type=WholeNumber(0, 65535), help="0 = any free port")
@click.option("--catalog", "catalog_dir", type=FilePath(exists=True, path_type=Path),
              help="apply this catalog: a Coopr-format folder, or a YAML or JSON file of entities (as `muster catalog apply` reads)")
@click.option("--tenant", default="default", show_default=True, callback=_checked_tenants,
              help="the tenant (or several, comma-separated) the catalog is applied to and the provisioner serves")
@click.option("--capacity", default=8, show_default=True, type=WholeNumber(1, 10_000),
              help="provisioner workers (per provisioner process)")
@click.option("--planners", default=1, show_default=True, type=WholeNumber(1, 16),
              help="planner processes; they share the clusters (docs/scaling.md)")
@click.option("--autoscale", is_flag=True, help="start and drain provisioner processes on the planners' recommendation")
@click.option("--autoscale-min", default=1, show_default=True, type=WholeNumber(0, 64), help="provisioner processes at least")
@click.option("--autoscale-max", default=4, show_default=True, type=WholeNumber(1, 64), help="provisioner processes at most")
@click.option("--autoscale-cooldown", default=30.0, show_default=True, type=Duration(0), help="seconds between two changes")
@click.option("--tenant-limit", "tenant_limit", multiple=True, metavar="N|TENANT=N", callback=_checked_tenant_limits,
              help="every planner's --tenant-limit: tasks of a tenant in flight at once (repeatable; docs/planner.md)")
@click.option(ALLOW_OPTION, "webhook_allow", multiple=True, metavar="[TENANT=]HOST|CIDR[:PORT]", callback=_checked_webhook_allow,
              help="the notifier's, the pool service's and the planners': a webhook or a pool callback may go to this host name or "
                   "address range besides public addresses, on every port or on :PORT only; TENANT=: that tenant's webhooks and callbacks only "
                   f"(repeatable; ${ALLOW_ENV} too; {DOC})")
@click.option("--policy-deadline", default=None, type=Duration(0.1, 60.0),
              help="every planner's --policy-deadline: seconds one policy may evaluate before it denies the request "
                   "(default: the planner's; docs/governance.md)")
@network_options
def up(data_dir: Path, tracker_port: int, catalog_dir: Path | None, tenant: str, capacity: int, planners: int,
       autoscale: bool, autoscale_min: int, autoscale_max: int, autoscale_cooldown: float, tenant_limit: tuple[str, ...],
       webhook_allow: tuple[str, ...], policy_deadline: float | None, network: Network) -> None:
    """Start nats-server (unless NATS_URL is set) and every service as a process of its own (auth,
    solver, planner, provisioner, tracker, pool, governance, notifier); Ctrl-C stops all."""
    if autoscale and autoscale_min > autoscale_max:
        raise click.BadParameter(f"--autoscale-min {autoscale_min} is more than --autoscale-max {autoscale_max}")
    _check_tracing()
    catalog = read_catalog(catalog_dir) if catalog_dir is not None else None
    policy = AutoscalePolicy(min_processes=autoscale_min, max_processes=autoscale_max, capacity_each=capacity,
                             cooldown_s=autoscale_cooldown) if autoscale else None

    # One setting for both senders, and the planner that checks a callback when no pool service answers (decision 38).
    allows = [a for allow in webhook_allow for a in (ALLOW_OPTION, allow)]
    allow_file = allow_file_args(data_dir)  # (the same file: one `muster reload` for all three)

    async def main() -> None:
        deployment = Deployment(data_dir, nats_url=os.environ.get("NATS_URL"), tracker_port=tracker_port,
                                capacity=capacity, tenants=tenant, supervise=True, notify=_say, replicas={"planner": planners},
                                extra_args={"planner": _planner_args(tenant_limit, policy_deadline) + allows + allow_file,
                                            "notifier": allows + notifier_files(data_dir), "pool": allows + allow_file},
                                **network.deployment(data_dir))
        try:
            await deployment.start()
            async with contextlib.AsyncExitStack() as scaling:
                if policy is not None:  # stopped before the deployment is
                    await scaling.enter_async_context(autoscaling(deployment, policy, tenant))
                await _serve(deployment, data_dir, catalog, catalog_dir, tenant, planners, policy)
        finally:
            if deployment.started:
                await deployment.stop()
                console.print("stopped.")

    _run(_stoppable(main()))


def _planner_args(tenant_limit: tuple[str, ...], policy_deadline: float | None) -> list[str]:
    deadline = ["--policy-deadline", repr(policy_deadline)] if policy_deadline is not None else []
    return [*(a for limit in tenant_limit for a in ("--tenant-limit", limit)), *deadline]


async def _serve(deployment: Deployment, data_dir: Path, catalog: Catalog | None, catalog_dir: Path | None, tenant: str,
                 planners: int, policy: AutoscalePolicy | None) -> None:
    if catalog is not None and catalog_dir is not None:
        async with await MusterClient.connect(deployment.nats_url, token=_own_token(deployment), data_dir=deployment.data_dir) as client:
            for one in tenant_names(tenant):
                n = await _load_catalog(client, one, catalog, catalog_dir)
                console.print(f"catalog: {n} {'entity' if n == 1 else 'entities'} applied for tenant {one}")
    console.print(f"nats:    {deployment.nats_url}")
    console.print(f"tracker: {deployment.tracker_url}")
    console.print(f"logs:    {data_dir / 'logs'}")
    if (traces := tracing.describe()) is not None:
        console.print(f"traces:  {traces} (every service; docs/tracing.md)", markup=False, highlight=False, soft_wrap=True)
        if (clear := tracing.in_clear()) is not None:
            console.print(f"warning: {clear}", markup=False, highlight=False, soft_wrap=True, style="yellow")
        if (silent := tracing.collector_silent()) is not None:
            console.print(f"warning: {silent}", markup=False, highlight=False, soft_wrap=True, style="yellow")
    _print_credentials(deployment, data_dir)
    if planners > 1:
        console.print(f"planners: {planners} (they share the clusters: muster planners)")
    if policy is not None:
        console.print(f"autoscale: {policy.min_processes}..{policy.max_processes} provisioner processes of "
                      f"{policy.capacity_each} slots, cool-down {policy.cooldown_s:g} s")
    console.print(f"another shell: export MUSTER_DATA_DIR={data_dir.resolve()}  (or NATS_URL={deployment.nats_url} "
                  f"MUSTER_TRACKER_URL={deployment.tracker_url}{_shell_env(deployment)})")
    console.print("muster is up; Ctrl-C stops it.", style="bold")
    sys.stdout.flush()
    await _guarded(deployment)


def _check_tracing() -> None:
    """The OTEL_* variables every child is given, checked once here: otherwise each service
    exits at its start with the same complaint, and `muster up` gives up on the first."""
    try:
        tracing.describe()
    except tracing.TracingError as err:
        raise CliError(f"{err} (docs/tracing.md)", EXIT_INVALID) from None


def _own_token(deployment: Deployment) -> str | None:
    """The super admin's token when we run the auth service, else the caller's own."""
    return deployment.admin_token()


def _shell_env(deployment: Deployment) -> str:
    """What a shell needs besides the URLs to act here without the data directory: the
    credentials, the CA and, with mutual TLS, the local user's certificate."""
    env = {"MUSTER_CREDENTIALS": deployment.credentials} if deployment.auth_dir is not None else {}
    if deployment.tls is not None:
        env[CA_ENV] = deployment.tls.ca
        if deployment.tls.mutual:
            env |= {CERT_ENV: deployment.tls.folder / CLIENT_CERT, KEY_ENV: deployment.tls.folder / CLIENT_KEY}
    return "".join(f" {name}={path.resolve()}" for name, path in env.items())


def _print_credentials(deployment: Deployment, data_dir: Path) -> None:
    if deployment.auth_dir is None:
        return
    where = deployment.credentials
    console.print(f"access:  super admin {local_principal()}, credentials in {where} (mode 0600)")
    if where.resolve() != (Path(".muster") / "credentials").resolve():
        console.print(f"         other shells: export MUSTER_CREDENTIALS={where.resolve()}")


def _say(message: str) -> None:
    """The supervisor's news (a restart, a process given up on)."""
    console.print(message)
    sys.stdout.flush()


def _run(coro: Any) -> None:
    """Errors as every command reports them (muster.cli_support); Ctrl-C is a clean stop here."""
    try:
        run(coro)
    except CliError as err:
        if err.exit_code != EXIT_INTERRUPTED:
            raise


@translates
def start_errors(err: BaseException) -> CliError | None:
    if isinstance(err, TlsError | DataDirBusy | StartRefused):  # (a directory or port in use: the user's choice refused, as bad input)
        return CliError(str(err), EXIT_INVALID)
    return CliError(str(err), EXIT_FAILED) if isinstance(err, (StartError, ServerError, DownError)) else None


# -- demo ------------------------------------------------------------------------------------


def show_layout(layout: dict[str, Any], console: Console) -> None:
    """As every command's tables (muster.tables): in a pipe, plain columns with every value in full."""
    print_rows(f"layout: {layout['nodes']} nodes", ["count", "hardware", "image", "services"],
               [[str(g["count"]), g["hardwaretype"], g["imagetype"], ", ".join(g["services"])] for g in layout["layout"]],
               console, heading=True)


async def _tracker_job(deployment: Deployment, tenant: str, job_id: str, token: str | None) -> dict[str, Any]:
    """The job as the tracker shows it, within TRACKER_ANSWER_S: the demo waited aiohttp's
    default of 300 s for a tracker that said nothing, and a refusal read as a KeyError."""
    url = f"{deployment.tracker_url}/v1/jobs/{job_id}"
    logs = deployment.data_dir / "logs"
    try:
        async with aiohttp.ClientSession(connector=http_connector(),
                                         timeout=aiohttp.ClientTimeout(total=TRACKER_ANSWER_S)) as http:
            async with http.get(url, headers={"X-Muster-Tenant": tenant, **bearer_headers(token)},
                                ssl=http_ssl(deployment.data_dir)) as resp:
                body = await resp.json(content_type=None)
                if resp.status != 200 or not isinstance(body, dict) or "state" not in body:
                    said = body.get("error", {}).get("message") if isinstance(body, dict) else None
                    raise CliError(f"the tracker answered GET {url} with HTTP {resp.status}: {said or str(body)[:200]} "
                                   f"(its log: {logs / 'tracker.log'})", EXIT_FAILED)
                return body
    except TimeoutError:
        raise CliError(f"the tracker at {deployment.tracker_url} did not answer GET /v1/jobs/{job_id} within "
                       f"{TRACKER_ANSWER_S:g} s (the job itself ended: the log says so); its log: {logs / 'tracker.log'}",
                       EXIT_UNREACHABLE) from None
    except (aiohttp.ClientError, ValueError) as err:
        raise CliError(f"the tracker at {deployment.tracker_url} could not be read (GET /v1/jobs/{job_id}): "
                       f"{str(err) or type(err).__name__}; its log: {logs / 'tracker.log'}", EXIT_UNREACHABLE) from None


@click.command("down")
@_data_dir_option
@click.option("--timeout", default=30.0, show_default=True, type=Duration(1), help="how long to wait for each step (seconds, or 90s, 2m)")
def down(data_dir: Path, timeout: float) -> None:
    """Stop the deployment `muster up` runs on this data directory (from another shell or a
    script), as Ctrl-C in its terminal would."""
    stopped = run(stop_deployment(data_dir, timeout))
    if stopped is None:
        console.print(f"nothing to stop: no muster deployment runs on {data_dir}")
    elif stopped.supervisor is not None:
        console.print(f"stopped muster up (pid {stopped.supervisor}) on {data_dir}")
    else:
        how = f", {len(stopped.killed)} of them by SIGKILL" if stopped.killed else ""
        console.print(f"stopped {len(stopped.left)} processes `muster up` had left on {data_dir}{how}")


@click.command("demo")
@_data_dir_option
@click.option("--nodes", default=5, show_default=True, type=WholeNumber(2, 50),
              help="the demo cluster's nodes (not with --real or --pool: their stories have sizes of their own)")
@click.option("--tenant", default="default", show_default=True, callback=_checked_tenant,
              help="the tenant the demo catalog and cluster go to")
@click.option("--keep", is_flag=True, help="keep the cluster and everything running until Ctrl-C, to look around in the console")
@click.option("--pool", "on_pool", is_flag=True,
              help="the demo on a pool of SSH hosts on this machine: a cluster waits for hosts and gets them "
                   "when another is deleted (docs/pools.md)")
@click.option("--real", "real", is_flag=True,
              help="a NATS cluster that really forms, on Linux namespace nodes with their own sshd (needs root; "
                   "without it, on loopback addresses of this machine): examples/catalog-real. With --pool: the "
                   "pool's hosts are namespace nodes with their own sshd")
@network_options
def demo(data_dir: Path, nodes: int, tenant: str, keep: bool, on_pool: bool, real: bool, network: Network) -> None:
    """Start everything, load the demo catalog, build a cluster, show it, delete it."""
    ctx = click.get_current_context()
    if (real or on_pool) and ctx.get_parameter_source("nodes") is not click.core.ParameterSource.DEFAULT:
        # (it was taken and ignored: the stories' sizes are theirs)
        story = "builds two clusters on a pool of 4 hosts, of 3 and 2 nodes" if on_pool else "builds 3 nodes, grows them to 5 and shrinks them to 3"
        raise click.BadParameter(f"--nodes is the simulated demo's: --{'pool' if on_pool else 'real'} {story}", param_hint="--nodes")
    _check_tracing()

    from .real_demo import fresh_prefix

    real_prefix = fresh_prefix()  # the real demo's nodes' names: this run's own, swept after the deployment stops

    async def main() -> None:
        if real:  # the Ansible flavours' playbooks, for the provisioner this starts
            from .real_demo import REAL_CATALOG

            os.environ.setdefault("MUSTER_PLAYBOOK_PATH", str(REAL_CATALOG / "ansible"))
        deployment = Deployment(data_dir, nats_url=os.environ.get("NATS_URL"), tracker_port=0, tenants=tenant,
                                supervise=True, notify=_say, **network.deployment(data_dir))
        try:
            await deployment.start()
            console.print(f"nats {deployment.nats_url} · tracker {deployment.tracker_url} · logs {data_dir / 'logs'}")
            if on_pool:
                from .pool_demo import scenario

                await _guarded(deployment, scenario(deployment, data_dir, tenant, keep, console, real=real))
                return
            if real:
                await _guarded(deployment, _real_scenario(deployment, data_dir, tenant, real_prefix, keep))
                return
            await _guarded(deployment, _demo_scenario(deployment, nodes, tenant, keep))
        finally:
            if deployment.started:
                await deployment.stop()
                if real and not on_pool:
                    from .real_demo import sweep_left

                    await sweep_left(real_prefix, (data_dir / "nodes").resolve(), console)
                console.print("everything stopped.")

    _run(_stoppable(main()))


async def _real_scenario(deployment: Deployment, data_dir: Path, tenant: str, prefix: str, keep: bool) -> None:
    from services.provisioner.plugins.builtin.namespaces.system import root_refusal

    from . import real_demo

    refusal = root_refusal()
    if refusal:
        console.print(f"{refusal}: the nodes are localhost nodes on loopback addresses instead")
    async with await MusterClient.connect(deployment.nats_url, token=_own_token(deployment), data_dir=deployment.data_dir) as client:
        nodes = "on loopback addresses of this machine" if refusal else f"on this machine (namespaces, veths and a bridge named {prefix}-...)"
        kept = (f"its nodes {nodes}; another shell: export "
                f"MUSTER_DATA_DIR={data_dir.resolve()}, then muster cluster show nats-{prefix}; the console is at "
                f"{deployment.tracker_url}/ui/clusters") if keep else ""
        await real_demo.scenario(client, tenant, console, provider="local" if refusal else "ns", base_dir=(data_dir / "nodes").resolve(),
                                 prefix=prefix, kept=kept)


async def _demo_scenario(deployment: Deployment, nodes: int, tenant: str, keep: bool) -> None:
    async with await MusterClient.connect(deployment.nats_url, token=_own_token(deployment), data_dir=deployment.data_dir) as client:
        n = await _load_catalog(client, tenant, read_catalog(DEMO_CATALOG), DEMO_CATALOG)
        console.print(f"demo catalog loaded ({n} new entities) for tenant {tenant!r}")
        for n in range(1, 100):  # names are unique: a cluster kept by an earlier demo keeps "demo"
            name = "demo" if n == 1 else f"demo-{n}"
            reply = await client.send(tenant, CreateCluster(name=name, template="hadoop-small", nodes=nodes, requested_by="demo"))
            if not (isinstance(reply, Rejected) and "is taken" in reply.reason):
                break
        if not isinstance(reply, Accepted):
            raise CliError(f"create rejected: {getattr(reply, 'reason', reply.type)}", EXIT_INVALID)
        console.print(f"create accepted: job {reply.job_id}")
        console.print(f"cluster {reply.cluster_id}")
        console.print(f"console: {deployment.tracker_url}/ui/jobs/{reply.job_id}")
        if deployment.auth_dir is not None:
            console.print(f"         sign in with the token in {deployment.credentials} (a super admin's)")
        final = (await follow(client.events(reply.job_id), reply.job_id, "create", FINAL_JOB_EVENTS, timeout=DEMO_TIMEOUT_S)).final
        status = await _tracker_job(deployment, tenant, reply.job_id, _own_token(deployment))
        console.print(f"tracker says job {reply.job_id} {status['state']} ({status['tasks_total']} tasks)")
        if status.get("layout"):
            show_layout(status["layout"], console)
        if not isinstance(final, JobSucceeded):
            raise CliError(f"create ended {final.type}: {getattr(final, 'reason', '')}", EXIT_FAILED)
        if keep:
            console.print(f"kept running: the console is at {deployment.tracker_url}/ui/clusters; Ctrl-C stops everything.", style="bold")
            sys.stdout.flush()
            await asyncio.Event().wait()  # until Ctrl-C (or a service dies): `_guarded` ends it
        deleted = await client.send(tenant, DeleteCluster(cluster_id=reply.cluster_id, requested_by="demo"))
        if not isinstance(deleted, Accepted):
            raise CliError(f"delete rejected: {getattr(deleted, 'reason', deleted.type)}", EXIT_INVALID)
        final = (await follow(client.events(deleted.job_id), deleted.job_id, "delete", FINAL_JOB_EVENTS, timeout=DEMO_TIMEOUT_S)).final
        if not isinstance(final, JobSucceeded):
            raise CliError(f"delete ended {final.type}: {getattr(final, 'reason', '')}", EXIT_FAILED)
        console.print(f"cluster {reply.cluster_id} deleted.")
