"""Composition root of the planner service."""

from __future__ import annotations

import os
import socket
import contextlib
import json
from contextlib import AsyncExitStack
from typing import Any

import click
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import ConnectionClosedError

from contracts import subjects
from muster.bus.consume import consume_events
from muster.bus.eventstore import EventStore
from muster.runtime.service import main_for

from .app import Planner, PlannerConfig

log = structlog.get_logger("muster.planner")


async def start_planner(nc: Client, stack: AsyncExitStack, config: PlannerConfig) -> Planner:
    planner = Planner(nc=nc, store=EventStore(nc), config=config)
    stack.callback(planner.timers.cancel_all)
    await planner.resume()

    async def on_request(msg: Msg) -> None:
        # muster.ops.<tenant>.<principal>.<verb>: the server lets only <principal> send it.
        try:
            tenant, _principal, rest = subjects.parse_request(msg.subject)
            reply = await planner.handle_request(tenant, rest[0] if len(rest) == 1 else "", msg.data)
        except Exception:  # a bug must not leave a requester without an answer
            log.exception("request failed", subject=msg.subject)
            from contracts.commands import Rejected

            reply = Rejected(reason="internal error while handling the request; see the planner's log")
        if msg.reply:
            await msg.respond(reply.model_dump_json().encode())

    async def on_query(msg: Msg) -> None:
        # muster.q.<tenant>.<principal>.job.<id>: answered only by the planner that has the
        # job; the tracker falls back to the log when nobody answers.
        parts = msg.subject.split(".")
        view = planner.job_view(parts[2], parts[5]) if len(parts) == 6 else None
        if view is not None and msg.reply:
            await msg.respond(json.dumps(view).encode())

    async def on_metrics(msg: Msg) -> None:
        if msg.reply:
            await msg.respond(json.dumps({"planner": config.instance, "queues": planner.metrics.snapshot()}).encode())

    subs = [
        await nc.subscribe(subjects.PLANNER_METRICS, cb=on_metrics),
        await nc.subscribe(f"{subjects.OPS}.*.*.*", queue="planners", cb=on_request),
        await nc.subscribe(subjects.ALL_JOB_QUERIES, cb=on_query),
        await consume_events(nc.jetstream(), subjects.ALL_LAYOUT_EVENTS, "planner-layouts", planner.on_layout_event, ack_wait=config.ack_wait_s),
        await consume_events(nc.jetstream(), subjects.ALL_TASK_EVENTS, "planner-tasks", planner.on_task_event, ack_wait=config.ack_wait_s),
    ]
    for sub in subs:
        stack.push_async_callback(_unsubscribe, sub)
    return planner


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
              help="seconds before an event a dead planner held is redelivered to another")
def main(nats_url: str | None, instance: str | None, max_attempts: int, mode: str, task_timeout: float,
         action_timeout: float, ack_wait: float) -> None:
    """Run the planner service."""
    config = PlannerConfig(
        instance=instance or f"planner-{socket.gethostname()}-{os.getpid()}", max_attempts=max_attempts, mode=mode,
        task_timeout_s=task_timeout, action_timeout_s={"default": action_timeout}, ack_wait_s=ack_wait,
    )

    async def setup(nc: Client, stack: AsyncExitStack) -> None:
        await start_planner(nc, stack, config)

    main_for("planner", nats_url, setup)


