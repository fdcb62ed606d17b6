"""What a tenant sees of a reservation its planner died holding (decision 44, "Lifecycle"): how
long another planner refuses the tenant's creates for room nobody uses.

    python bench/spend_takeover_bench.py [--lease-ttl S] [--rounds N]

One nats-server of its own, a solver, two `muster planner` processes (2 shards, one each,
`--lease-ttl S`), a tenant with the demo catalog and `examples/policies/tenant_budget.rego` at
a budget of 1.00 an hour (a 3-node create of `small` costs 0.15). Each round: the entry of the
victim's shard is written holding 20 `small` nodes (1.00 an hour: what a reservation of a
planner killed before it recorded its job leaves), the victim is killed (SIGKILL) at once, and
a 3-node create is sent to the survivor's shard: refused, over the budget. Measured from the
kill: when the survivor wrote the entry again from the log (it gained the shard: the hold is
gone; seen on a watch of the bucket), and the same create sent again then: admitted. A new
victim is started for the next round (it takes a shard back: one each again).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contracts import subjects
from contracts.commands import Accepted, CreateCluster, Rejected
from contracts.governance import GovernancePut
from contracts.records import Append
from muster.bus import shards
from muster.bus.connect import connect
from muster.bus.eventstore import EventStore
from muster.bus.server import NatsServer
from muster.bus.shards import shard_of
from muster.bus.spend import NatsSpend
from muster.bus.streams import ensure_streams
from muster.bus.wire import stop_watch
from muster.catalog.files import load_catalog
from muster.catalog.store import apply_catalog
from muster.client import MusterClient
from services.planner.domain import planning
from services.solver.entrypoint import start_solver

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "muster" / "demo" / "catalog"
TENANT = "phantom"
BUDGET = (ROOT / "examples" / "policies" / "tenant_budget.rego").read_text().replace("budget := 5", "budget := 1")
HELD = {"clusters": 1, "nodes": {"sim": {"small": 20}}}


class Watched:
    """The shards' owners, from a watch of the leases bucket (woken, never polled)."""

    def __init__(self) -> None:
        self.owners: dict[int, str] = {}
        self.changed = asyncio.Condition()

    async def follow(self, watcher: Any) -> None:
        async for entry in watcher:
            if entry is None:
                continue
            self.owners = shards.owners_after(self.owners, entry)
            async with self.changed:
                self.changed.notify_all()

    async def until(self, check: Any, timeout: float) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(check), timeout)

    def split(self, names: tuple[str, ...]) -> bool:
        return set(Counter(self.owners.values())) == set(names) and set(Counter(self.owners.values()).values()) == {1}


def _planner(url: str, name: str, ttl: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "muster", "planner", "--nats-url", url, "--instance", name, "--shards", "2",
                             "--lease-ttl", str(ttl)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())


def _stop(procs: dict[str, subprocess.Popen[bytes]]) -> None:
    for p in procs.values():
        if p.poll() is None:
            p.terminate()
            p.wait(timeout=15)


async def main(ttl: float, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with NatsServer(Path(tmp)) as server, AsyncExitStack() as stack:
            conns = {name: await connect(server.url, name=name) for name in ("solver", "client")}
            for conn in conns.values():
                stack.push_async_callback(conn.close)
            js = conns["client"].jetstream()
            await ensure_streams(js)
            store = EventStore(conns["client"])
            await apply_catalog(store, TENANT, load_catalog(DEMO))
            subject = subjects.governance_events(TENANT, "policy", "tenant_budget")
            await store.append(subject, [Append(GovernancePut(kind="policy", name="tenant_budget",
                                                              entity={"name": "tenant_budget", "source": BUDGET}, version=1, by="bench"),
                                                msg_id=f"{subject}:1")])
            await start_solver(conns["solver"], stack, "solver")
            board = NatsSpend(js)  # (the planners' own reader of the bucket)
            await board.start()
            stack.push_async_callback(board.stop)
            seen = Watched()
            watcher = await (await shards.leases_bucket(js)).watch("shard.*")
            task = asyncio.create_task(seen.follow(watcher))
            stack.push_async_callback(stop_watch, watcher)
            stack.callback(task.cancel)
            procs = {name: _planner(server.url, name, ttl) for name in ("planner-1", "planner-2")}
            stack.callback(_stop, procs)
            client = MusterClient(conns["client"])
            n = 0
            for r in range(rounds):
                await seen.until(lambda: seen.split(tuple(procs)), 60)
                victim_shard = 0
                victim, survivor = seen.owners[0], seen.owners[1]
                while shard_of(planning.created_ids(TENANT, f"p{n}")[1], 2) != 1:
                    n += 1
                rid, n = f"p{n}", n + 1
                key = f"{TENANT}.{victim_shard}"
                await board.put(key, HELD)
                procs[victim].send_signal(signal.SIGKILL)
                killed = time.perf_counter()
                procs[victim].wait()
                first = await client.request(CreateCluster(name=rid, template="hadoop-small", nodes=3, request_id=rid), tenant=TENANT)
                refused_in = time.perf_counter() - killed
                await board.seen(key, lambda value: value != HELD, 10 * ttl)
                released = time.perf_counter() - killed
                again = await client.request(CreateCluster(name=rid, template="hadoop-small", nodes=3, request_id=rid), tenant=TENANT)
                admitted = time.perf_counter() - killed
                said = first.reason if isinstance(first, Rejected) else type(first).__name__
                print(f"round {r}: victim {victim} (shard {victim_shard}), survivor {survivor}; "
                      f"create at +{refused_in:.2f} s: {said}; entry written again by the survivor at +{released:.2f} s "
                      f"({json.dumps(board.known()[key], sort_keys=True)}); the same create at +{admitted:.2f} s: "
                      f"{'Accepted' if isinstance(again, Accepted) else again}")
                procs[victim] = _planner(server.url, victim, ttl)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lease-ttl", type=float, default=10.0, help="the planners' lease TTL (the default of `muster planner`)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.lease_ttl, args.rounds))
