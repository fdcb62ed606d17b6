"""Composition root of a provisioner process: plugins + workers on the bus."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import click
import structlog
from nats.aio.client import Client

from muster.bus.eventstore import EventStore
from muster.runtime.service import main_for

from .plugins import PluginRegistry
from .worker import WorkerConfig, Workers

log = structlog.get_logger("muster.provisioner")


def load_secrets(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise click.ClickException(f"cannot read secrets file {path}: {err}") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise click.ClickException(f"secrets file {path} must be a JSON object of provider name -> field map")
    return data


@click.command("provisioner")
@click.option("--nats-url", envvar="NATS_URL", default=None, help="NATS server URL (default: $NATS_URL or nats://127.0.0.1:4222)")
@click.option("--id", "provisioner_id", default=None, help="provisioner id (default: prov-<host>-<pid>)")
@click.option("--tenants", default="default", show_default=True, help="comma-separated tenants whose tasks this provisioner takes")
@click.option("--class", "provisioner_class", default="default", show_default=True, help="provisioner class")
@click.option("--capacity", default=8, show_default=True, type=click.IntRange(1, 10_000), help="concurrent tasks")
@click.option("--ack-wait", default=30.0, show_default=True, type=click.FloatRange(0.1), help="seconds of silence before a task is redelivered")
@click.option("--plugins-dir", multiple=True, type=click.Path(file_okay=False, path_type=Path), help="extra plugin folders")
@click.option("--secrets", "secrets_file", envvar="MUSTER_SECRETS", default=None, help="JSON file: provider name -> sensitive fields")
def main(nats_url: str | None, provisioner_id: str | None, tenants: str, provisioner_class: str, capacity: int,
         ack_wait: float, plugins_dir: tuple[Path, ...], secrets_file: str | None) -> None:
    """Run a provisioner: register plugins, then take tasks as they arrive."""
    pid = provisioner_id or f"prov-{socket.gethostname()}-{os.getpid()}"
    registry = PluginRegistry.discover(extra_dirs=plugins_dir, secrets=load_secrets(secrets_file))
    config = WorkerConfig(provisioner_id=pid, tenants=tuple(t for t in tenants.split(",") if t),
                          provisioner_class=provisioner_class, capacity=capacity, ack_wait_s=ack_wait)

    async def setup(nc: Client, stack: AsyncExitStack) -> None:
        workers = Workers(js=nc.jetstream(), store=EventStore(nc), executor=registry, config=config)
        await workers.ensure_queues()
        runner = asyncio.create_task(workers.run(), name="workers")
        stack.push_async_callback(registry.aclose)

        async def drain() -> None:
            await workers.drain()
            await runner

        stack.push_async_callback(drain)
        log.info("plugins", plugins=[p["name"] for p in registry.describe()], capacity=capacity, tenants=config.tenants)

    main_for("provisioner", nats_url, setup)
