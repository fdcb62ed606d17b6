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

    python bench/governed_admission_bench.py --requests N --races M

Then (`--races`, on a nats-server of its own) what a conflict costs: two planners in this
process (`start_planner`, 2 shards, one each, each on its own connection), a tenant with the
budget policy nothing reaches, and M pairs of creates sent at the same moment, one to each
planner's shard. Whether a create's reservation lost (another planner's write came between its
judgement and its write: judged again, written again) is read from the planner's own board
(`put_if`'s answer, counted as it returns). Printed: every pair's two round trips and which
lost, then the round trips of the requests judged once and of those judged again.
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contracts import subjects
from contracts.commands import Accepted, CreateCluster
from contracts.governance import GovernancePut
from contracts.records import Append
from muster.bus.connect import connect
from muster.bus.eventstore import EventStore
from muster.bus.server import NatsServer
from muster.bus.shards import shard_of
from muster.bus.streams import ensure_streams
from muster.catalog.files import load_catalog
from muster.catalog.store import apply_catalog
from muster.client import MusterClient
from services.planner.app import Planner
from services.planner.config import PlannerConfig
from services.planner.domain import planning
from services.planner.entrypoint import start_planner
from services.solver.entrypoint import start_solver

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "muster" / "demo" / "catalog"
BUDGET = (ROOT / "examples" / "policies" / "tenant_budget.rego").read_text().replace("budget := 5", "budget := 1000000")
RACE_TENANT = "race"
CEILING = 'package muster.ceiling\nimport rego.v1\n\ndeny contains "too dear" if input.cost.per_hour > 1000000\n'


def _ms(samples: list[float], q: float) -> str:
    ordered = sorted(samples)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000:.2f}"


async def _policy(store: EventStore, tenant: str, name: str, source: str) -> None:
    await apply_catalog(store, tenant, load_catalog(DEMO))
    subject = subjects.governance_events(tenant, "policy", name)
    await store.append(subject, [Append(GovernancePut(kind="policy", name=name, entity={"name": name, "source": source},
                                                      version=1, by="bench"), msg_id=f"{subject}:1")])


async def _held(planner: Planner, count: int) -> None:
    """Wait, woken by the lease watch, until the planner holds `count` shards."""
    leases = planner.ownership.leases  # type: ignore[attr-defined]
    async with leases._changed:
        await asyncio.wait_for(leases._changed.wait_for(lambda: len(leases.held) == count), 60)


def _lost(planner: Planner, conflicts: list[str]) -> None:
    """Each reservation of this planner that another's write got ahead of, by cluster: the real
    `put_if`, its answer noted on the way back."""
    board = planner.spend.board if planner.spend is not None else None
    assert board is not None
    put_if = board.put_if

    async def noted(name: str, spend: Any, tenant: str, last: int) -> int | None:
        moved = await put_if(name, spend, tenant, last)
        if moved is not None:
            conflicts.append(name)
        return moved

    board.put_if = noted  # type: ignore[method-assign]


async def race(pairs: int) -> tuple[list[float], list[float], list[float], list[str]]:
    """Round trips of the creates judged once and of those judged again, the loser's less the
    winner's in each pair where exactly one lost, and each pair's line."""
    once: list[float] = []
    again: list[float] = []
    apart: list[float] = []
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        async with NatsServer(Path(tmp)) as server, AsyncExitStack() as stack:
            conns = {}
            for name in ("planner-a", "planner-b", "solver", "client"):
                conns[name] = await connect(server.url, name=name)
                stack.push_async_callback(conns[name].close)
            await ensure_streams(conns["solver"].jetstream())
            store = EventStore(conns["client"])
            await _policy(store, RACE_TENANT, "budget", BUDGET)
            await start_solver(conns["solver"], stack, "solver")
            planners = [await start_planner(conns[name], stack, PlannerConfig(instance=f"bench-{name}", shards=2))
                        for name in ("planner-a", "planner-b")]
            for planner in planners:
                await _held(planner, 1)
            conflicts: list[str] = []
            for planner in planners:
                _lost(planner, conflicts)
            client = MusterClient(conns["client"])
            by_shard: dict[int, list[str]] = {0: [], 1: []}
            n = 0
            while min(len(ids) for ids in by_shard.values()) < pairs + 3:
                by_shard[shard_of(planning.created_ids(RACE_TENANT, f"race-{n}")[1], 2)].append(f"race-{n}")
                n += 1

            async def timed(rid: str) -> tuple[float, Any]:
                started = time.perf_counter()
                reply = await client.request(CreateCluster(name=rid, template="hadoop-small", nodes=3, request_id=rid),
                                             tenant=RACE_TENANT)
                return time.perf_counter() - started, reply

            for i in range(-3, pairs):  # three pairs first: imports, the sandbox, caches
                rids = [by_shard[0][i + 3], by_shard[1][i + 3]]
                conflicts.clear()
                done = await asyncio.gather(*(timed(rid) for rid in rids))
                for _, reply in done:
                    if not isinstance(reply, Accepted):
                        raise SystemExit(f"race: {reply}")
                lost = {shard for shard in (0, 1) if any(name == f"{RACE_TENANT}.{shard}" for name in conflicts)}
                if i < 0:
                    continue
                for shard, (took, _) in enumerate(done):
                    (again if shard in lost else once).append(took)
                if len(lost) == 1:
                    loser = next(iter(lost))
                    apart.append(done[loser][0] - done[1 - loser][0])
                said = ",".join(f"shard {s} x{sum(1 for c in conflicts if c == f'{RACE_TENANT}.{s}')}" for s in sorted(lost)) or "none"
                lines.append(f"pair {i}: shard 0 {done[0][0] * 1000:.2f} ms, shard 1 {done[1][0] * 1000:.2f} ms, lost: {said}")
    return once, again, apart, lines


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
                await _policy(store, tenant, name, source)
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


def _summary(what: str, samples: list[float]) -> str:
    if not samples:
        return f"{what}: n=0"
    return (f"{what}: n={len(samples)} p50={_ms(samples, 0.5)} ms p90={_ms(samples, 0.9)} ms "
            f"mean={statistics.mean(samples) * 1000:.2f} ms")


async def both(requests: int, races: int) -> None:
    await main(requests)
    if races:
        once, again, apart, lines = await race(races)
        print("\n".join(lines))
        print(_summary("race: judged once", once))
        print(_summary("race: judged again (its reservation lost)", again))
        print(_summary("race: the loser's less the winner's, same pair", apart))
        if once and again:
            print(f"a conflict's cost at p50: {(statistics.median(again) - statistics.median(once)) * 1000:.2f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=100, help="creates of each tenant measured")
    parser.add_argument("--races", type=int, default=0, help="pairs of creates sent at once to two planners (0: none)")
    args = parser.parse_args()
    asyncio.run(both(args.requests, args.races))
