"""The no-op pipeline at capacity 16 with the TASKS work queue on memory storage (as shipped
since decision 13) and on file storage (as before it, and as data directories of older versions
keep it), each next to raw publish + fetch + ack measured right before it on the same server.

    python bench/tasks_storage_bench.py [--tasks 5000] [--rounds 2]

EVENTS stays on file storage with `sync_interval: always` in both runs; only where the task
messages themselves are kept changes. The raw figure #16.3 compares with is a work queue on
file storage (a durable queue, as in every run since #16 was filed); the raw rate of a work
queue on memory storage is printed beside it, so that neither ratio hides the other. Each run
has a nats-server of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import sys
import tempfile
from pathlib import Path

import structlog
from nats.js.api import StorageType, StreamConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dispatch_bench as db  # a sibling script, not a package

from muster.bus import streams
from muster.bus.server import NatsServer

SHIPPED = streams.tasks_config


def tasks_on(storage: StorageType) -> None:
    def config(replicas: int = 1) -> StreamConfig:
        return dataclasses.replace(SHIPPED(replicas), storage=storage)

    streams.tasks_config = config  # ensure_streams looks it up when it runs


async def one(storage: StorageType, n: int, name: str) -> tuple[float, float, float]:
    tasks_on(storage)
    with tempfile.TemporaryDirectory(prefix="muster-tasks-storage-") as tmp:
        async with NatsServer(Path(tmp) / "nats", name="tasks-storage") as server:
            nc = await db.connect(server.url, name="bench")
            try:
                await streams.ensure_streams(nc.jetstream())
                raw = await db.raw_throughput(server.url, n, name)
                raw_memory = await db.raw_throughput(server.url, n, f"{name}M", StorageType.MEMORY)
                run = await db.task_throughput(server.url, nc, n, 16)
            finally:
                await nc.close()
    return run.rate, raw, raw_memory


async def main(args: argparse.Namespace) -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING), cache_logger_on_first_use=True)
    print("| round | TASKS on | tasks/s | raw publish+fetch+ack /s, file queue | ratio (#16.3: >= 0.5) "
          "| raw, memory queue | ratio to it |")
    print("|---|---|---|---|---|---|---|")
    for r in range(1, args.rounds + 1):
        for storage in (StorageType.MEMORY, StorageType.FILE):
            rate, raw, raw_memory = await one(storage, args.tasks, f"RAW{r}{storage.value}")
            print(f"| {r} | {storage.value}{' (shipped)' if storage == StorageType.MEMORY else ''} | {rate:,.0f} | {raw:,.0f} "
                  f"| {rate / raw:.2f} | {raw_memory:,.0f} | {rate / raw_memory:.2f} |", flush=True)
    streams.tasks_config = SHIPPED


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=2)
    asyncio.run(main(parser.parse_args()))
