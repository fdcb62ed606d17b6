"""What the planner's read of a tenant's catalog costs at a request, by the length of the
catalog's history (docs/benchmarks.md, "Scale: what a create reads and sends whatever its size
(session 36)"). Not a test: run it, read the figures.

    .venv/bin/python bench/catalog_reads_bench.py [--applies 0,10,100] [--reads 200]

One nats-server of its own (`sync_interval: always`, a temp store). The demo catalog applied
once, then `--applies` times more with every service changed (a new version of each: the
history a tenant that applies its catalog now and then builds up). Measured, `--reads` times
each, one at a time, CPU of this process and wall time:

- `whole`: the tenant's whole catalog history read and folded (`read_state`: what the planner
  did at every create, configure, retry before session 36);
- `since`: `LogCatalogs.load` after a first read (what it does now: what came since its last
  read, nothing here, folded over the state it kept).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from muster.bus.connect import connect  # noqa: E402
from muster.bus.eventstore import EventStore  # noqa: E402
from muster.bus.server import NatsServer  # noqa: E402
from muster.bus.streams import ensure_streams  # noqa: E402
from muster.catalog.files import load_catalog  # noqa: E402
from muster.catalog.store import append_changes, catalog_filter, check_apply, read_state  # noqa: E402
from services.planner.state import LogCatalogs  # noqa: E402

TENANT = "bench"
DEMO = ROOT / "muster" / "demo" / "catalog"


async def _apply(store: EventStore, version: int) -> None:
    catalog = load_catalog(DEMO)
    if version:
        for name, service in list(catalog.services.items()):
            catalog.services[name] = service.model_copy(update={"description": f"{service.description} ({version})"})
    state = await read_state(store, TENANT)
    check = check_apply(state, catalog, None)
    assert check.ok, check.errors
    await append_changes(store, TENANT, check.changes, state.last_seq, "bench")


async def _timed(read: object, n: int) -> tuple[float, float]:
    cpu, wall = [], []
    for _ in range(n):
        c, w = time.process_time(), time.perf_counter()
        await read()  # type: ignore[operator]
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return statistics.median(cpu) * 1e3, statistics.median(wall) * 1e3


async def main(applies: list[int], reads: int) -> None:
    with tempfile.TemporaryDirectory(prefix="catalog-reads-") as tmp:
        server = await NatsServer(Path(tmp) / "nats").start()
        try:
            nc = await connect(server.url, name="bench")
            await ensure_streams(nc.jetstream())
            store = EventStore(nc)
            done = 0
            await _apply(store, 0)
            print("| applies after the first | catalog events | whole history: CPU / wall ms | since the last read: CPU / wall ms |")
            print("|---|---|---|---|")
            for target in applies:
                while done < target:
                    done += 1
                    await _apply(store, done)
                catalogs = LogCatalogs(store)
                await catalogs.load(TENANT)
                events = len(await store.read(catalog_filter(TENANT)))
                whole = await _timed(lambda: read_state(store, TENANT), reads)
                since = await _timed(lambda c=catalogs: c.load(TENANT), reads)
                print(f"| {target} | {events} | {whole[0]:.2f} / {whole[1]:.2f} | {since[0]:.2f} / {since[1]:.2f} |", flush=True)
            await nc.close()
        finally:
            await server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--applies", default="0,10,100", help="applies after the first, comma-separated, ascending")
    parser.add_argument("--reads", type=int, default=200, help="reads timed at each length")
    options = parser.parse_args()
    asyncio.run(main([int(a) for a in options.applies.split(",")], options.reads))
