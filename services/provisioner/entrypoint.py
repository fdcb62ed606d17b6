"""Composition root of a provisioner process: plugins + workers on the bus."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
from contextlib import AsyncExitStack
from dataclasses import replace
from functools import partial
from pathlib import Path

import click
import nats.errors
import structlog
from nats.aio.client import Client

from contracts import subjects
from contracts.tasks import ProvisionerInfo
from muster.bus.connect import CredentialsError, auth_required, credentials, default_data_dir, principal_of
from muster.bus.eventstore import EventStore
from muster.cli_support import CliError, Duration, FilePath, WholeNumber
from muster.runtime.exits import STAY_DOWN_EXIT
from muster.runtime.logs import configure_logging
from muster.runtime.service import SERVICE_URL_HELP, main_for
from muster.secretsfile import SecretsFileError, load_secrets

from .app import Provisioner
from .domain.secrets import ProvisionerSecrets
from .heap import freeze_started_heap
from .plugins import PluginError, PluginRegistry
from .presence import DEFAULT_TTL_S, MAX_TTL_S, untried_elsewhere
from .worker import Executor, WorkerConfig, Workers

log = structlog.get_logger("muster.provisioner")


def default_id() -> str:
    """`prov-<host>-<pid>`, with whatever the host name has that a subject token may not
    (dots of a domain) written as `-`."""
    host = re.sub(r"[^A-Za-z0-9_\-]", "-", socket.gethostname().split(".")[0]) or "host"
    return f"prov-{host}-{os.getpid()}"


async def granted_tenants(nc: Client, provisioner_class: str) -> tuple[str, ...] | None:
    """The tenants whose `provisioner_class` queue this provisioner's grant names, from the auth
    service; None when it has no grant to go by (no auth, or a system identity)."""
    me = principal_of(nc)
    if not auth_required(nc):
        return None
    try:
        reply = json.loads((await nc.request(subjects.auth_request(me, "whoami"), b"{}", timeout=5)).data)
    except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
        log.warning("no auth service answers: serving --tenants")
        return None
    if not reply.get("ok") or reply["data"].get("service") != "provisioner":
        return None
    return tuple(q["tenant"] for q in reply["data"].get("queues", []) if q["class"] == provisioner_class)


def default_work_dir(provisioner_id: str) -> Path:
    """Plugin state and keys survive restarts under the same id: in the deployment's data
    directory, as every command finds it ($MUSTER_DATA_DIR, else ./.muster; it was ./.muster
    whatever $MUSTER_DATA_DIR said)."""
    return default_data_dir() / "provisioner" / provisioner_id


@click.command("provisioner")
@click.option("--nats-url", envvar="NATS_URL", default=None, help=SERVICE_URL_HELP)
@click.option("--id", "provisioner_id", default=None, help="provisioner id (default: prov-<host>-<pid>)")
@click.option("--tenants", default="default", show_default=True, help="comma-separated tenants whose tasks this provisioner takes")
@click.option("--class", "provisioner_class", default="default", show_default=True, help="provisioner class")
@click.option("--capacity", default=8, show_default=True, type=WholeNumber(1, 10_000), help="concurrent tasks")
@click.option("--ack-wait", default=30.0, show_default=True, type=Duration(0.1), help="seconds of silence before a task is redelivered")
@click.option("--claim-ahead", default=None, type=WholeNumber(0, 100_000),
              help="tasks claimed beyond --capacity while plugins return within 1 s, each waiting for a slot with its claim "
                   "stored, back to the queue after 1 s without one (default: as many as --capacity; 0: never; "
                   "docs/provisioner.md)")
@click.option("--plugins-dir", multiple=True, type=FilePath(file_okay=False, path_type=Path), help="extra plugin folders")
@click.option("--secrets", "secrets_file", envvar="MUSTER_SECRETS", default=None, help="JSON file: provider name -> sensitive fields, named secrets under @secrets, each tenant's own "
                   "under @tenants; the notifier's format too (docs/secrets.md)")
@click.option("--work-dir", type=FilePath(file_okay=False, path_type=Path), default=None,
              help="plugin state and keys, kept across restarts (default: <data dir>/provisioner/<id>, the data dir "
                   "$MUSTER_DATA_DIR or ./.muster)")
@click.option("--presence-ttl", default=DEFAULT_TTL_S, show_default=True, type=WholeNumber(1, MAX_TTL_S),
              help="seconds without a refresh after which this provisioner counts as gone")
def main(nats_url: str | None, provisioner_id: str | None, tenants: str, provisioner_class: str, capacity: int,
         ack_wait: float, claim_ahead: int | None, plugins_dir: tuple[Path, ...], secrets_file: str | None,
         work_dir: Path | None, presence_ttl: int) -> None:
    """Run a provisioner: register plugins, then take tasks as they arrive.

    Stops cleanly on SIGTERM/SIGINT or on a drain request (`muster provisioners drain ID`):
    takes no new task, finishes those in flight, deregisters, exits.

    With a token (auth on), the provisioner is its token's principal and serves the queues its
    grant names (`execute` on `queue:<class>` per tenant): `--id` must match, `--tenants` is not
    used."""
    try:
        principal = credentials().principal
    except CredentialsError as err:
        raise CliError(str(err)) from None
    pid = provisioner_id or (principal if principal != subjects.ANONYMOUS else default_id())
    tenant_list = tuple(t for t in tenants.split(",") if t)
    try:
        subjects.token(pid, "provisioner id")
        subjects.token(provisioner_class, "provisioner class")
        for t in tenant_list:
            subjects.token(t, "tenant")
    except subjects.SubjectError as err:
        raise click.BadParameter(str(err)) from None
    if not tenant_list:
        raise click.BadParameter("give at least one tenant", param_hint="--tenants")
    configure_logging("provisioner")  # before the plugins load and say so: JSON on stderr, in provisioner.log under `muster up`
    try:
        secrets = ProvisionerSecrets.of(load_secrets(secrets_file), f"secrets file {secrets_file}")
        registry = PluginRegistry.discover(extra_dirs=plugins_dir, secrets=secrets, work_dir=work_dir or default_work_dir(pid))
    except (PluginError, SecretsFileError) as err:  # bad input (exit 2), the file and the field named
        raise CliError(str(err)) from None
    config = WorkerConfig(provisioner_id=pid, tenants=tenant_list, provisioner_class=provisioner_class,
                          capacity=capacity, ack_wait_s=ack_wait, claim_ahead=claim_ahead)
    replaced: list[ProvisionerInfo] = []

    def on_replaced(other: ProvisionerInfo) -> None:
        # It stops as SIGTERM stops it (its rollbacks run to their end; its forward attempts
        # stopped with its lease), then exits so that no supervisor starts it again: a new
        # process would take the id back from the other, which would then exit and come back.
        replaced.append(other)
        log.error(f"another process took provisioner id {pid} over; exiting (exit status {STAY_DOWN_EXIT}: "
                  "not to be started again; run one process per id)", provisioner=pid, by_host=other.host,
                  by_pid=other.pid, by_session=other.session)
        signal.raise_signal(signal.SIGTERM)

    async def setup(nc: Client, stack: AsyncExitStack) -> None:
        stack.push_async_callback(registry.aclose)
        registry.elsewhere = partial(untried_elsewhere, nc, pid)  # a secret this provisioner lacks: may another have it?
        granted = await granted_tenants(nc, provisioner_class)
        if granted is not None and pid != principal:
            raise click.BadParameter(f"the token is provisioner {principal}'s, not {pid}'s", param_hint="--id")
        if granted is not None and set(granted) != set(config.tenants) and tenants != "default":
            log.warning("--tenants is not used: the grant decides", granted=list(granted), given=tenants)
        own = replace(config, tenants=granted) if granted is not None else config
        if not own.tenants:
            raise click.ClickException(f"provisioner {pid} is granted no queue of class {provisioner_class!r}: "
                                       f"muster grant {pid} execute --tenant <t> --scope queue:{provisioner_class}")
        provisioner = Provisioner(
            nc, registry, own, presence_ttl_s=presence_ttl,
            replicas=int(os.environ.get("MUSTER_REPLICAS", "1")),
            # Drained on request: stop the process the way SIGTERM does (it is already drained).
            on_drained=lambda: signal.raise_signal(signal.SIGTERM),
            # A queue granted or revoked later is taken up live (docs/provisioner.md, "Tenants").
            grants=(lambda: granted_tenants(nc, provisioner_class)) if granted is not None else None,
            on_replaced=on_replaced,
        )
        if len(own.tenants) > 1 and (shared := registry.secrets.shared_names()):
            # The operator's choice, said where it can be seen: names only (docs/secrets.md, "Whose secrets").
            log.warning("secrets shared by every tenant this provisioner serves", tenants=list(own.tenants), shared=shared)
        await provisioner.start()
        stack.push_async_callback(provisioner.stop)
        freeze_started_heap()
        log.info("plugins", provisioner=pid, plugins=[f"{p['name']} {p['version']}" for p in registry.describe()],
                 capacity=capacity, tenants=own.tenants, work_dir=str(registry.work_dir))

    main_for("provisioner", nats_url, setup)
    if replaced:
        raise SystemExit(STAY_DOWN_EXIT)


async def start_workers(nc: Client, stack: AsyncExitStack, executor: Executor, config: WorkerConfig) -> Workers:
    """Workers on `nc` (their queues declared), drained when `stack` closes: for in-process
    compositions (tests, benchmarks) that need no registration or presence."""
    workers = Workers(nc.jetstream(), EventStore(nc), executor, config)
    await workers.ensure_queues()
    runner = asyncio.create_task(workers.run())

    async def stop() -> None:
        await workers.drain()
        await runner

    stack.push_async_callback(stop)
    return workers
