"""The planner service on NATS: its adapters handed to the composition root (`bootstrap.py`),
the planner subscribed to what the routing tables (`routing.py`) name, and `muster planner`."""

from __future__ import annotations

import contextlib
import os
import re
import socket
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import click
import structlog
from nats.aio.client import Client
from nats.errors import ConnectionClosedError
from nats.js.api import DeliverPolicy

from muster.allowfile import ALLOW_FILE_ENV, ALLOW_FILE_HELP, ALLOW_FILE_OPTION, AllowSettings, on_sighup, reload_allowed
from muster.bus.budgets import NatsBudgets
from muster.bus.connect import auth_required
from muster.bus.consume import consume_batches, consume_events
from muster.bus.eventstore import EventStore
from muster.bus.leasethread import ThreadedLeases
from muster.bus.shards import DEFAULT_SHARDS, DEFAULT_TTL_S
from muster.bus.snapshotstore import SnapshotStore
from muster.bus.spend import NatsSpend
from muster.bus.taskqueue import NatsTaskQueue
from muster.cli_support import Duration, FilePath, WholeNumber
from muster.destinations import ALLOW_ENV, ALLOW_OPTION, POOL, AllowError
from muster.routing import batch_router, router
from muster.runtime.service import SERVICE_URL_HELP, main_for
from services.auth.domain.state import IdentityState
from services.auth.view import IdentityView
from services.governance.domain.deadline import POLICY_DEADLINE_ENV, POLICY_DEADLINE_S
from services.pool.mirror import PoolMirror
from services.provisioner.plugins.specs import catalog_plugins

from .adapters import NatsCallbackCheck, NatsSolver, NatsWorkers
from .app import Planner, PlannerConfig
from .bootstrap import bootstrap
from .catalog import CatalogWrites
from .domain.limits import parse_tenant_limits
from .nodemaps import LazyBucket, NodeMaps
from .ports import CatalogSource, Ownership, Shards
from .presencewatch import watch_presence
from .replies import Replies, Responders
from .routing import BUDGETS, POISON, POOL_FOLD, PROVISIONER_GONE, QUEUE_RESETS, REPLIES, ROUTES
from .sharding import Sharding, ShardOwnership

CONSUMER_IDLE_S = 3600.0
"""A planner's own consumers are deleted by the server this long after it went away."""

def nats_planner(nc: Client, config: PlannerConfig, store: EventStore | None = None, *, ownership: Ownership | None = None,
                 identities: IdentityState | None = None, queue: NatsTaskQueue | None = None,
                 pools: PoolMirror | None = None, catalogs: CatalogSource | None = None, budgets: NatsBudgets | None = None,
                 shards: Shards | None = None, spend: NatsSpend | None = None,
                 callbacks: NatsCallbackCheck | None = None) -> Planner:
    """The planner on NATS adapters: the log and task queue on JetStream, dry runs asking the
    solvers, the nodes maps and snapshots in KV buckets, resource pools followed live
    (docs/pools.md); `ownership`: which clusters it acts for (default: all; shards: `start_planner`);
    `budgets`: the concurrency limits' budgets shared with the other planners, by `shards`;
    `spend`: the tenants' spend by shard, shared with them too; `callbacks`: the check of a pool
    callback (default: one with `config.callbacks_allowed`)."""
    store = store or EventStore(nc, writer_name=config.instance)  # the log names who wrote what
    return bootstrap(store, queue or NatsTaskQueue(store.js), config, ownership=ownership, identities=identities,
                     pools=pools or PoolMirror(store.js), catalogs=catalogs, solver=NatsSolver(nc, config.solve_timeout_s),
                     nodemaps=NodeMaps(LazyBucket(store.js, config.replicas)), workers=NatsWorkers(nc, log_=store),
                     snapshots=SnapshotStore(nc, config.replicas, store.timeout) if config.snapshot_every > 0 else None,
                     budgets=budgets, shards=shards, callbacks=callbacks or NatsCallbackCheck(nc, config.callbacks_allowed), spend=spend)


def offered_plugins(nc: Client) -> Callable[[str], Awaitable[list[dict[str, Any]]]]:
    """What the live provisioners of a tenant registered (their presence records)."""

    async def offered(tenant: str) -> list[dict[str, Any]]:
        from services.provisioner.presence import live_provisioners

        try:
            live = await live_provisioners(nc, tenant=tenant, timeout=3.0)
        except Exception as err:  # noqa: BLE001 - then only the built-in plugins count, and the answer says which
            structlog.get_logger("muster.planner").warning("live provisioners unknown", error=str(err) or type(err).__name__)
            return []
        return [plugin for p in live for plugin in p.info.plugins]

    return offered


async def start_planner(nc: Client, stack: AsyncExitStack, config: PlannerConfig,
                        allow: AllowSettings | None = None) -> Planner:
    """A planner that holds a fair share of the shards (docs/scaling.md): it listens first,
    then takes its leases, and rebuilds the clusters of each shard it gains; on the way out it
    hands its shards over before anything else stops. `allow`: where `config.callbacks_allowed`
    came from, read again on SIGHUP (None: not)."""
    # On a thread and a connection of their own: a busy planner loop must not let them lapse.
    servers = ",".join(u.geturl() for u in nc.servers)

    async def leases_gone() -> None:
        # Without leases it acts for no shard, and no other planner can take them while it
        # lives: closing its own connection too makes `run_service` exit, to be started again.
        structlog.get_logger("muster.planner").error("the shard leases' connection to NATS was closed for good; "
                                                     "closing the planner's too, to be started again")
        await nc.close()

    leases = ThreadedLeases(servers, config.instance, shards=config.shards, ttl_s=config.lease_ttl_s, replicas=config.replicas,
                            on_closed=leases_gone)
    identities = None
    if auth_required(nc):
        # Auth on (this planner authenticated): requests are checked against the requester's
        # grants, kept current by following the identity events.
        view = await IdentityView(nc).start()
        stack.push_async_callback(view.stop)
        identities = view.state
    queue = NatsTaskQueue(nc.jetstream())
    store = EventStore(nc, writer_name=config.instance)  # the log names who wrote what (fencing checks)
    mirror = PoolMirror(store.js)
    ownership = ShardOwnership(leases)
    budgets = NatsBudgets(nc.jetstream(), config.replicas)
    spend = NatsSpend(nc.jetstream(), config.replicas)
    callbacks = NatsCallbackCheck(nc, config.callbacks_allowed)
    planner = nats_planner(nc, config, store, ownership=ownership, identities=identities, queue=queue,
                           pools=mirror, budgets=budgets, shards=ownership, spend=spend, callbacks=callbacks)
    sharding = Sharding(nc, planner, leases)
    stack.callback(planner.timers.cancel_all)
    if planner.state.snapshotter is not None:
        stack.callback(planner.state.snapshotter.close)

    replies = Replies(planner, CatalogWrites(EventStore(nc), catalog_plugins(), identities, offered=offered_plugins(nc)), sharding,
                      identities)
    responders = Responders()
    subs: list[Any] = []
    stack.push_async_callback(responders.close)  # after the subscriptions below are gone
    stack.push_async_callback(sharding.close)
    for reply in REPLIES:
        cb = responders.responder(getattr(replies, reply.answer), reply.concurrent)
        subs.append(await nc.subscribe(reply.subject, queue=reply.queue, cb=cb))
    for route in ROUTES:
        # A consumer of this planner's own: every event reaches every planner, each acts on its
        # clusters' (a shard's events that came before it was gained are read from the log).
        durable = f"{route.durable}-{_durable_token(config.instance)}"
        options: dict[str, Any] = dict(ack_wait=config.ack_wait_s, on_poison=getattr(planner, POISON),
                                       deliver_policy=DeliverPolicy.NEW, inactive_threshold=CONSUMER_IDLE_S,
                                       types=frozenset(route.handlers))
        if route.batch:  # one subscriber: the events delivered together are taken together
            subs.append(await consume_batches(nc.jetstream(), route.filter, durable, batch_router(planner, route), **options))
        else:
            subs.append(await consume_events(nc.jetstream(), route.filter, durable, router(planner, route), **options))
    for sub in subs:
        stack.push_async_callback(_unsubscribe, sub)
    # Before the shards: an attempt queued from here on is in the TASKS this watch has seen, and
    # the budgets the shards' jobs dispatch under are known.
    await queue.watch_resets(getattr(planner, QUEUE_RESETS))
    await budgets.start(getattr(planner, BUDGETS))
    stack.push_async_callback(budgets.stop)
    await spend.start()  # the other planners' spend known before a request is judged
    stack.push_async_callback(spend.stop)
    if planner.spend is not None:
        stack.push_async_callback(planner.spend.close)
    await leases.start()  # gains a fair share of the shards: their clusters and jobs are rebuilt
    stack.push_async_callback(leases.stop)
    # After that resume: the pools' history replays into the jobs just rebuilt (a grant recorded
    # while this planner was down is taken now), and admission sees every pool.
    mirror.watch(getattr(planner, POOL_FOLD))
    await mirror.start()
    stack.push_async_callback(mirror.stop)
    await mirror.wait_ready()
    if isinstance(planner.workers, NatsWorkers):
        await watch_presence(nc, stack, planner.workers.sessions, getattr(planner, PROVISIONER_GONE))
    if allow is not None:
        on_sighup(stack, lambda: reload_allowed(allow, callbacks.reconfigure, "planner"))
    return planner


def _durable_token(instance: str) -> str:
    return re.sub(r"[^A-Za-z0-9_\-]", "-", instance)[:64]


async def _unsubscribe(sub: Any) -> None:
    with contextlib.suppress(ConnectionClosedError):  # the connection died first
        await sub.unsubscribe()


@click.command("planner")
@click.option("--nats-url", envvar="NATS_URL", default=None, help=SERVICE_URL_HELP)
@click.option("--instance", default=None, help="this planner's name (default: planner-<host>-<pid>)")
@click.option("--max-attempts", default=3, show_default=True, type=WholeNumber(1), help="attempts per task before the job fails")
@click.option("--mode", type=click.Choice(["eager", "staged"]), default="eager", show_default=True,
              help="eager: a task runs once what it waits for is done; staged: a stage at a time (docs/planner.md)")
@click.option("--task-timeout", default=900.0, show_default=True, type=Duration(0.01),
              help="seconds without an outcome after which a task attempt counts as failed")
@click.option("--action-timeout", default=600.0, show_default=True, type=Duration(0.01),
              help="time limit given to plugins for one action")
@click.option("--ack-wait", default=30.0, show_default=True, type=Duration(0.1),
              help="seconds before an unacknowledged event is delivered to this planner again")
@click.option("--shards", default=DEFAULT_SHARDS, show_default=True, type=WholeNumber(1, 1024),
              help="shards the clusters are split into (the same for every planner)")
@click.option("--lease-ttl", default=DEFAULT_TTL_S, show_default=True, type=Duration(1.0),
              help="seconds after which a dead planner's shards are taken over")
@click.option("--tenant-limit", "tenant_limit", multiple=True, metavar="N|TENANT=N",
              help="tasks of a tenant in flight at once: N for every tenant, TENANT=N for one (repeatable)")
@click.option("--policy-deadline", envvar=POLICY_DEADLINE_ENV, default=POLICY_DEADLINE_S, show_default=True,
              type=Duration(0.1, 60.0),
              help=f"seconds one policy may evaluate before it denies the request (${POLICY_DEADLINE_ENV} too; docs/governance.md)")
@click.option(ALLOW_OPTION, "allow", envvar=ALLOW_ENV, multiple=True, metavar="[TENANT=]HOST|CIDR[:PORT]",
              help="the pool service's setting, with which the planner checks a pool callback when no pool service "
                   f"answers; repeat, or separate with commas (${ALLOW_ENV}; {POOL.doc})")
@click.option(ALLOW_FILE_OPTION, "allow_file", envvar=ALLOW_FILE_ENV, default=None, type=FilePath(), metavar="FILE", help=ALLOW_FILE_HELP)
def main(nats_url: str | None, instance: str | None, max_attempts: int, mode: str, task_timeout: float,
         action_timeout: float, ack_wait: float, shards: int, lease_ttl: float, tenant_limit: tuple[str, ...],
         policy_deadline: float, allow: tuple[str, ...], allow_file: str | None) -> None:
    """Run the planner service. SIGHUP reads its allow file again."""
    default, per_tenant = _tenant_limits(tenant_limit)
    settings = AllowSettings(allow, allow_file)
    try:
        allowed = settings.allowed()
    except AllowError as err:
        raise click.BadParameter(str(err)) from None
    config = PlannerConfig(
        instance=instance or f"planner-{socket.gethostname()}-{os.getpid()}", max_attempts=max_attempts, mode=mode,
        task_timeout_s=task_timeout, action_timeout_s={"default": action_timeout}, ack_wait_s=ack_wait,
        replicas=int(os.environ.get("MUSTER_REPLICAS", "1")), shards=shards, lease_ttl_s=lease_ttl,
        tenant_limit=default, tenant_limits=per_tenant, policy_deadline_s=policy_deadline, callbacks_allowed=allowed,
    )

    async def setup(nc: Client, stack: AsyncExitStack) -> None:
        await start_planner(nc, stack, config, settings)

    main_for("planner", nats_url, setup)


def _tenant_limits(values: tuple[str, ...]) -> tuple[int | None, dict[str, int]]:
    try:
        return parse_tenant_limits(values)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--tenant-limit") from None


