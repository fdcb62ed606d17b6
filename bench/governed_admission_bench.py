"""What a strict tenant budget costs a governed admission (decision 44, "Strict"): the request's
round trip of a create judged by a policy that reads the tenant's totals (its admission writes a
reservation to the KV bucket `spend`, conditional on the tenant's keys) against one judged by a
policy that does not (no write), on the same planner, sent alternately.

    python bench/governed_admission_bench.py [--requests N]

One nats-server of its own, a solver, a planner started as `muster planner` starts it
(`start_planner`, 2 shards, both held: the reservation is written as with several planners),
the demo catalog in two tenants: `reserves` has a budget policy (`input.tenant.per_hour`, a
budget nothing reaches), `plain` a cost ceiling (`input.cost.per_hour`) nothing reaches. No
provisioner: the jobs wait for one, the admissions are what is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contracts import subjects
from contracts.commands import Accepted, CreateCluster
from contracts.governance import GovernancePut
from contracts.records import Append
from muster.bus.connect import connect
from muster.bus.eventstore import EventStore
from muster.bus.server import NatsServer
from muster.bus.streams import ensure_streams
from muster.catalog.files import load_catalog
from muster.catalog.store import apply_catalog
from muster.client import MusterClient
from services.planner.config import PlannerConfig
from services.planner.entrypoint import start_planner
from services.solver.entrypoint import start_solver

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "muster" / "demo" / "catalog"
BUDGET = (ROOT / "examples" / "policies" / "tenant_budget.rego").read_text().replace("budget := 5", "budget := 1000000")
CEILING = 'package muster.ceiling\nimport rego.v1\n\ndeny contains "too dear" if input.cost.per_hour > 1000000\n'


def _ms(samples: list[float], q: float) -> str:
    ordered = sorted(samples)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000:.2f}"


async def main(requests: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with NatsServer(Path(tmp)) as server, AsyncExitStack() as stack:
            conns = {}
            for name in ("planner", "solver", "client"):
                conns[name] = await connect(server.url, name=name)
                stack.push_async_callback(conns[name].close)
            await ensure_streams(conns["planner"].jetstream())
            store = EventStore(conns["client"])
            for tenant, name, source in (("reserves", "budget", BUDGET), ("plain", "ceiling", CEILING)):
                await apply_catalog(store, tenant, load_catalog(DEMO))
                subject = subjects.governance_events(tenant, "policy", name)
                await store.append(subject, [Append(GovernancePut(kind="policy", name=name, entity={"name": name, "source": source},
                                                                  version=1, by="bench"), msg_id=f"{subject}:1")])
            await start_solver(conns["solver"], stack, "solver")
            await start_planner(conns["planner"], stack, PlannerConfig(instance="bench-governed", shards=2))
            client = MusterClient(conns["client"])
            times: dict[str, list[float]] = {"reserves": [], "plain": []}
            for n in range(-3, requests):  # three of each first: imports, the sandbox, caches
                for tenant in times:
                    started = time.perf_counter()
                    reply = await client.request(CreateCluster(name=f"c{n + 3}", template="hadoop-small", nodes=3), tenant=tenant)
                    took = time.perf_counter() - started
                    if not isinstance(reply, Accepted):
                        raise SystemExit(f"{tenant}: {reply}")
                    if n >= 0:
                        times[tenant].append(took)
    for tenant, samples in times.items():
        what = "policy reads input.tenant (reservation written)" if tenant == "reserves" else "policy does not (no reservation)"
        print(f"{tenant}: {what}: n={len(samples)} p50={_ms(samples, 0.5)} ms p90={_ms(samples, 0.9)} ms "
              f"mean={statistics.mean(samples) * 1000:.2f} ms")
    extra = statistics.median(times["reserves"]) - statistics.median(times["plain"])
    print(f"extra at p50: {extra * 1000:.2f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=100, help="creates of each tenant measured")
    asyncio.run(main(parser.parse_args().requests))
