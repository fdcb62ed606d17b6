"""Composition root of the planner service: the service layer (`app.Planner`) on NATS adapters,
subscribed to what the routing tables (`routing.py`) name."""

from __future__ import annotations

import contextlib
import os
import re
import socket
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import replace
from functools import partial
from typing import Any

import click
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import ConnectionClosedError
from nats.js.api import DeliverPolicy

from muster.bus.connect import auth_required
from muster.bus.consume import consume_events
from muster.bus.eventstore import EventStore
from muster.bus.leasethread import ThreadedLeases
from muster.bus.shards import DEFAULT_SHARDS, DEFAULT_TTL_S
from muster.bus.snapshotstore import SnapshotStore
from muster.bus.taskqueue import NatsTaskQueue
from muster.routing import router
from muster.runtime.service import main_for
from services.auth.view import IdentityView
from services.pool.mirror import PoolMirror
from services.provisioner.plugins.specs import catalog_plugins

from .adapters import NatsSolver, NatsWorkers
from .app import Planner, PlannerConfig
from .authz import OperationAuthz
from .catalog import CatalogWrites, with_catalog
from .config import Hooks
from .nodemaps import LazyBucket, NodeMaps
from .pools import PoolBroker
from .routing import REPLIES, ROUTES, Reply, operation
from .sharding import Sharding, settler

CONSUMER_IDLE_S = 3600.0
"""A planner's own consumers are deleted by the server this long after it went away."""

def nats_planner(nc: Client, config: PlannerConfig, store: EventStore | None = None, hooks: Hooks | None = None,
                 queue: NatsTaskQueue | None = None) -> Planner:
    """The planner on NATS: the log and task queue on JetStream, dry runs asking the solvers,
    resource pools followed live (docs/pools.md); `hooks`: which clusters it acts for (shards)."""
    store = store or EventStore(nc, writer_name=config.instance)  # the log names who wrote what
    broker = PoolBroker(store, PoolMirror(store))
    planner = Planner(store, queue or NatsTaskQueue(store.js), config=config, solver=NatsSolver(nc, config.solve_timeout_s),
                      nodemaps=NodeMaps(LazyBucket(store.js, config.replicas)), workers=NatsWorkers(nc),
                      snapshots=SnapshotStore(nc, config.replicas, store.timeout) if config.snapshot_every > 0 else None,
                      hooks=replace(hooks or Hooks(), dispatch=broker, after=(broker.after,), pools=broker))
    broker.attach(planner)
    return planner


async def start_planner(nc: Client, stack: AsyncExitStack, config: PlannerConfig) -> Planner:
    """A planner that holds a fair share of the shards (docs/scaling.md): it listens first,
    then takes its leases, and rebuilds the clusters of each shard it gains; on the way out it
    hands its shards over before anything else stops."""
    # On a thread and a connection of their own: a busy planner loop must not let them lapse.
    servers = ",".join(u.geturl() for u in nc.servers)
    leases = ThreadedLeases(servers, config.instance, shards=config.shards, ttl_s=config.lease_ttl_s, replicas=config.replicas)
    hooks = Hooks(owns=lambda tenant, cluster_id: leases.owns_cluster(cluster_id), settle=settler(leases))
    queue = NatsTaskQueue(nc.jetstream())
    planner = nats_planner(nc, config, hooks=hooks, queue=queue)
    sharding = Sharding(nc, planner, leases)
    planner.sharding = sharding  # type: ignore[attr-defined]
    stack.callback(planner.timers.cancel_all)
    catalog = CatalogWrites(EventStore(nc), catalog_plugins())
    if auth_required(nc):
        # Auth on (this planner authenticated): requests are checked against the requester's
        # grants, kept current by following the identity events.
        view = await IdentityView(nc).start()
        stack.push_async_callback(view.stop)
        planner.hooks.admission = (*planner.hooks.admission, OperationAuthz(view.state, planner.jobs.get))
        catalog.identity = view.state
    if planner.state.snapshotter is not None:
        stack.callback(planner.state.snapshotter.close)

    subs: list[Any] = []
    stack.push_async_callback(sharding.close)  # after the subscriptions below are gone
    for reply in REPLIES:
        if reply.answer is operation:  # each in a task of its own: one waiting for a shard's owner holds up no other
            answer = with_catalog(catalog, sharding.operation)
            subs.append(await nc.subscribe(reply.subject, queue=reply.queue, cb=partial(sharding.respond, answer=answer)))
            continue
        subs.append(await nc.subscribe(reply.subject, queue=reply.queue, cb=_responder(planner, reply)))
    for route in ROUTES:
        # A consumer of this planner's own: every event reaches every planner, each acts on its
        # clusters' (a shard's events that came before it was gained are read from the log).
        subs.append(await consume_events(nc.jetstream(), route.filter, f"{route.durable}-{_durable_token(config.instance)}",
                                         router(planner, route), ack_wait=config.ack_wait_s, on_poison=planner.on_poison,
                                         deliver_policy=DeliverPolicy.NEW, inactive_threshold=CONSUMER_IDLE_S))
    for sub in subs:
        stack.push_async_callback(_unsubscribe, sub)
    # Before the shards: an attempt queued from here on is in the TASKS this watch has seen.
    await queue.watch_resets(planner.queue_lost)
    await leases.start()  # gains a fair share of the shards: their clusters and jobs are rebuilt
    stack.push_async_callback(leases.stop)
    # After that resume: the pools' history replays into the jobs just rebuilt (a grant recorded
    # while this planner was down is taken now), and admission sees every pool.
    mirror = planner.hooks.pools.mirror
    await mirror.start()
    stack.push_async_callback(mirror.stop)
    await mirror.wait_ready()
    return planner


def _durable_token(instance: str) -> str:
    return re.sub(r"[^A-Za-z0-9_\-]", "-", instance)[:64]


def _responder(planner: Planner, reply: Reply) -> Callable[[Msg], Awaitable[None]]:
    async def on_msg(msg: Msg) -> None:
        answer = await reply.answer(planner, msg.subject, msg.data)
        if answer is not None and msg.reply:
            await msg.respond(answer)

    return on_msg


async def _unsubscribe(sub: Any) -> None:
    with contextlib.suppress(ConnectionClosedError):  # the connection died first
        await sub.unsubscribe()


@click.command("planner")
@click.option("--nats-url", envvar="NATS_URL", default=None, help="NATS server URL (default: $NATS_URL or nats://127.0.0.1:4222)")
@click.option("--instance", default=None, help="this planner's name (default: planner-<host>-<pid>)")
@click.option("--max-attempts", default=3, show_default=True, help="attempts per task before the job fails")
@click.option("--mode", type=click.Choice(["eager", "staged"]), default="eager", show_default=True)
@click.option("--task-timeout", default=900.0, show_default=True, type=click.FloatRange(0.01),
              help="seconds without an outcome after which a task attempt counts as failed")
@click.option("--action-timeout", default=600.0, show_default=True, type=click.FloatRange(0.01),
              help="time limit given to plugins for one action")
@click.option("--ack-wait", default=30.0, show_default=True, type=click.FloatRange(0.1),
              help="seconds before an unacknowledged event is delivered to this planner again")
@click.option("--shards", default=DEFAULT_SHARDS, show_default=True, type=click.IntRange(1, 1024),
              help="shards the clusters are split into (the same for every planner)")
@click.option("--lease-ttl", default=DEFAULT_TTL_S, show_default=True, type=click.FloatRange(1.0),
              help="seconds after which a dead planner's shards are taken over")
@click.option("--tenant-limit", "tenant_limit", multiple=True, metavar="N|TENANT=N",
              help="tasks of a tenant in flight at once: N for every tenant, TENANT=N for one (repeatable)")
def main(nats_url: str | None, instance: str | None, max_attempts: int, mode: str, task_timeout: float,
         action_timeout: float, ack_wait: float, shards: int, lease_ttl: float, tenant_limit: tuple[str, ...]) -> None:
    """Run the planner service."""
    default, per_tenant = _tenant_limits(tenant_limit)
    config = PlannerConfig(
        instance=instance or f"planner-{socket.gethostname()}-{os.getpid()}", max_attempts=max_attempts, mode=mode,
        task_timeout_s=task_timeout, action_timeout_s={"default": action_timeout}, ack_wait_s=ack_wait,
        replicas=int(os.environ.get("MUSTER_REPLICAS", "1")), shards=shards, lease_ttl_s=lease_ttl,
        tenant_limit=default, tenant_limits=per_tenant,
    )

    async def setup(nc: Client, stack: AsyncExitStack) -> None:
        await start_planner(nc, stack, config)

    main_for("planner", nats_url, setup)


def _tenant_limits(values: tuple[str, ...]) -> tuple[int | None, dict[str, int]]:
    default: int | None = None
    per_tenant: dict[str, int] = {}
    for value in values:
        tenant, _, number = value.rpartition("=")
        if not number.isdigit() or int(number) < 1:
            raise click.BadParameter(f"{value!r}: give N or TENANT=N with N >= 1", param_hint="--tenant-limit")
        if tenant:
            per_tenant[tenant] = int(number)
        else:
            default = int(number)
    return default, per_tenant


