"""Resource pools: how fast the pool decides, what it costs to hold, and how soon a freed host
reaches a waiting request, next to a raw JetStream publish round trip measured in the same run.

    python bench/pool_bench.py [--hosts 10000] [--waiting 1000] [--cycles 2000] [--samples 200] [--write-docs]

1. Decisions (pure, the Pool aggregate alone): a pool of `--hosts` hosts (four kinds), every
   host held, `--waiting` requests waiting (1-4 hosts each, four kinds of requirement). One
   cycle releases one held node and lets the pool decide: the release, then grants to the first
   in line that now fit, each an event. Reported: cycles/s and events/s, the time of one
   cycle (p50, p99), the memory of the pool (tracemalloc), and the fold of all its events.
2. Freed host -> grant recorded (a real nats-server, a pool service in this process): a
   requester appends "released" to its request subject; the pool service takes it from the
   log, decides, and records the release and the waiting request's grant; the time until that
   grant is delivered to a follower of the pool's subject, next to `js.publish` round trips in
   the same run.
3. Freed host -> the waiting job's next task queued (planner, pool service, solver and a
   provisioner in this process; one pool host, an SSH server here): from the pool's record of
   the release to the waiting job's `TaskQueued`, both as a follower of the log receives them
   (the goal: within 3 x a raw `js.publish` round trip of the same run), and where it goes:
   the store times of the hops between (the pool's grant, recorded with the release since
   `HostsReleased` v2; the planner's record of the node's host; `TaskQueued`).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import goals
from contracts import subjects
from contracts.pools import HostSpec, NodeNeed, PoolNodesReported, PoolRequest, grants_in
from services.pool.domain.pool import Pool, PoolCreated

KINDS = [{"cpu": 16, "memory": "64G", "labels": ["ssd"]}, {"cpu": 8, "memory": "32G", "labels": ["ssd"]},
         {"cpu": 8, "memory": "16G"}, {"cpu": 4, "memory": "8G"}]
NEEDS = ["", "cpu >= 8", "labels contains ssd", "cpu >= 8, memory >= 32G"]
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4"
PERCENTILE_99 = 0.99


def hosts(n: int) -> list[HostSpec]:
    return [HostSpec.model_validate({"id": f"h{i:05d}", "address": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}",
                                     "host_keys": [KEY], "properties": KINDS[i % len(KINDS)]}) for i in range(n)]


def request(i: int, rng: random.Random, size: int | None = None, need: str | None = None) -> PoolRequest:
    size = size or rng.randint(1, 4)
    need = NEEDS[rng.randrange(len(NEEDS))] if need is None else need
    return PoolRequest(request_id=f"r{i}", pool="bench", tenant=f"t{i % 3}", cluster_id=f"c{i}",
                       nodes=[NodeNeed(node_id=f"n{k}", requires=need) for k in range(size)],
                       urgency=rng.randint(0, 100))


def full_pool(n_hosts: int, n_waiting: int, rng: random.Random) -> tuple[Pool, int]:
    """Every host held (requests for any host, granted at once), then `n_waiting` waiting
    requests of every kind."""
    pool = Pool(PoolCreated(pool="bench", by="bench"))
    pool.add_hosts(hosts(n_hosts), by="bench")
    i = 0
    while free := sum(pool.book.free_counts().values()):
        pool.request(request(i, rng, size=min(free, rng.randint(1, 4)), need=""))
        i += 1
    while len(pool.requests.waiting) < n_waiting:
        pool.request(request(i, rng))
        i += 1
    return pool, i


async def raw_publish_rtt(js: Any, samples: int) -> list[float]:
    """Round trips of a plain `js.publish` of 200 bytes to the log's stream: the limit."""
    rtt = []
    for _ in range(samples):
        t = time.perf_counter()
        await js.publish("muster.evt.bench.raw.x", b"x" * 200, headers={"Muster-Type": "none"})
        rtt.append(time.perf_counter() - t)
    return rtt


def _rss_bytes() -> int:
    """This process's resident memory now (Linux)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def decisions(n_hosts: int, n_waiting: int, cycles: int) -> list[tuple[str, str]]:
    rng = random.Random(7)
    gc.collect()
    before = _rss_bytes()
    t = time.perf_counter()
    pool, next_id = full_pool(n_hosts, n_waiting, rng)
    build_s = time.perf_counter() - t
    gc.collect()
    held_mb = (_rss_bytes() - before) / 1e6
    events = pool.collect_events()
    t = time.perf_counter()
    folded: Any = None
    for e in events:
        folded = e.mutate(folded)
    fold_s = time.perf_counter() - t
    assert folded.state()["hosts"] == n_hosts

    holders = sorted(pool.book.holders)
    times: list[float] = []
    recorded = 0
    started = time.perf_counter()
    for c in range(cycles):
        cluster, node = holders[rng.randrange(len(holders))]
        host = pool.book.held(cluster, node)
        if host is None or host.holder is None:
            holders = sorted(pool.book.holders)
            continue
        fact = PoolNodesReported(request_id="x", cluster_id=cluster, status="released", node_ids=[node])
        t = time.perf_counter()
        pool.report(host.holder.tenant, fact)
        times.append(time.perf_counter() - t)
        recorded += len(pool.collect_events())
        if len(pool.requests.waiting) < n_waiting:  # keep the line as long as it was
            pool.request(request(next_id, rng))
            next_id += 1
            pool.collect_events()
        if c % 200 == 0:
            holders = sorted(pool.book.holders)
    total = time.perf_counter() - started
    times.sort()
    return [
        ("pool", f"{n_hosts:,} hosts, all held; {n_waiting:,} requests waiting (1-4 hosts, 4 kinds)"),
        ("release + decide, one cycle p50", f"{statistics.median(times) * 1e6:,.0f} µs"),
        ("release + decide, one cycle p99", f"{times[int(len(times) * PERCENTILE_99)] * 1e6:,.0f} µs"),
        ("decision cycles", f"{len(times) / total:,.0f} /s ({recorded / total:,.0f} events recorded/s)"),
        ("memory of the pool (hosts, line, indexes; RSS growth)", f"{held_mb:,.1f} MB"),
        ("building it (every host added and granted, the line filled)", f"{build_s:,.1f} s"),
        ("fold of its events (rebuild)", f"{len(events):,} events in {fold_s * 1e3:,.0f} ms ({len(events) / fold_s:,.0f} events/s)"),
    ]


async def freed_to_granted(samples: int) -> list[tuple[str, str]]:
    from nats.js.api import DeliverPolicy

    from contracts.pool_commands import AddHosts
    from muster.bus.connect import connect
    from muster.bus.eventstore import Append, EventStore
    from muster.bus.server import NatsServer
    from muster.bus.streams import ensure_streams
    from services.pool import client as pools
    from services.pool.entrypoint import start_pool_service

    with tempfile.TemporaryDirectory() as tmp:
        async with NatsServer(Path(tmp)) as server, AsyncExitStack() as stack:
            nc = await connect(server.url, name="bench")
            stack.push_async_callback(nc.close)
            service_nc = await connect(server.url, name="pool-service")
            stack.push_async_callback(service_nc.close)
            await ensure_streams(nc.jetstream())
            await start_pool_service(service_nc, stack, "bench")
            store = EventStore(nc)
            js = nc.jetstream()
            rtt = await raw_publish_rtt(js, samples)
            await pools.send(nc, "bench", AddHosts(hosts=hosts(1)))
            grants: dict[str, asyncio.Future[float]] = {}
            accepted: dict[str, asyncio.Future[float]] = {}

            async def on_pool_event(msg: Any) -> None:
                kind = (msg.headers or {}).get("Muster-Type")
                body = json.loads(msg.data)
                # A grant alone, or with the release that made it (HostsReleased v2).
                found = [(grants, body["request_id"])] if kind == "HostsGranted" else \
                    [(grants, g["request_id"]) for g in body.get("granted", [])] if kind == "HostsReleased" else \
                    [(accepted, body["request"]["request_id"])] if kind == "RequestAccepted" else []
                for wanted, rid in found:
                    if rid in wanted and not wanted[rid].done():
                        wanted[rid].set_result(time.perf_counter())

            await js.subscribe(subjects.pool_events("bench"), ordered_consumer=True, cb=on_pool_event,
                               deliver_policy=DeliverPolicy.NEW)
            lat = []
            holder = "r0"
            grants[holder] = asyncio.get_running_loop().create_future()
            await _ask(store, holder)
            await asyncio.wait_for(grants[holder], 10)
            for i in range(1, samples + 1):
                waiting = f"r{i}"
                grants[waiting] = asyncio.get_running_loop().create_future()
                accepted[waiting] = asyncio.get_running_loop().create_future()
                await _ask(store, waiting)
                await asyncio.wait_for(accepted[waiting], 10)  # it waits in line before the host is freed
                fact = PoolNodesReported(request_id=holder, cluster_id=f"c-{holder}", status="released", node_ids=["n0"])
                t = time.perf_counter()
                await store.append(subjects.pool_request_events("bench", "bench", holder),
                                   [Append(event=fact, msg_id=f"{holder}-released")])
                lat.append(await asyncio.wait_for(grants[waiting], 10) - t)
                holder = waiting
    p50_raw, p50 = statistics.median(rtt) * 1e6, statistics.median(lat) * 1e6
    lat.sort()
    # No goal here: #13.9's goal is the task queued (measured below, with the planner), and
    # this figure once went to run_all's goals table under that name.
    return [
        ("raw js.publish round trip p50 (the limit)", f"{p50_raw:,.0f} µs"),
        ("freed host -> grant recorded and delivered p50", f"{p50:,.0f} µs ({p50 / p50_raw:.1f} x raw)"),
        ("freed host -> grant recorded and delivered p99", f"{lat[int(len(lat) * PERCENTILE_99)] * 1e6:,.0f} µs"),
    ]


async def freed_to_task_queued(samples: int) -> list[tuple[str, str]]:
    """A pool of one host (an SSH server in this process); cluster i+1 waits for it while
    cluster i holds it; deleting cluster i frees it. Measured: from the pool recording the
    release (the host is free) to the waiting job's create task queued, both as delivered to
    a follower of the log, with the planner, the pool service and a provisioner in this process."""
    from nats.js.api import DeliverPolicy

    from contracts.catalog import Catalog
    from contracts.commands import Accepted, CreateCluster, DeleteCluster
    from contracts.pool_commands import AddHosts
    from muster.bus.connect import connect
    from muster.bus.consume import consume_routes
    from muster.bus.eventstore import EventStore, recorded_from_msg
    from muster.bus.server import NatsServer
    from muster.bus.streams import ensure_streams
    from muster.catalog.store import apply_catalog
    from muster.client import MusterClient
    from muster.demo.pool_hosts import LocalPoolHosts
    from services.planner.app import PlannerConfig
    from services.planner.entrypoint import start_planner
    from services.pool import client as pools
    from services.pool.entrypoint import start_pool_service
    from services.provisioner.entrypoint import start_workers
    from services.provisioner.plugins import PluginRegistry
    from services.provisioner.worker import WorkerConfig
    from services.solver.routing import ROUTES as SOLVER_ROUTES
    from services.solver.service import SolverService

    with tempfile.TemporaryDirectory() as tmp:
        async with NatsServer(Path(tmp) / "nats") as server, AsyncExitStack() as stack:
            ncs = []
            for name in ("bench", "planner", "pools", "solver", "provisioner"):
                ncs.append(await connect(server.url, name=name))
                stack.push_async_callback(ncs[-1].close)
            nc = ncs[0]
            await ensure_streams(nc.jetstream())
            hosts = LocalPoolHosts(Path(tmp) / "hosts")
            stack.push_async_callback(hosts.stop)
            spec = await hosts.start("only")
            await start_pool_service(ncs[2], stack, "bench")
            await start_planner(ncs[1], stack, PlannerConfig(instance="bench"))
            solver = SolverService(EventStore(ncs[3]), "bench")
            for sub in await consume_routes(ncs[3].jetstream(), solver, SOLVER_ROUTES):
                stack.push_async_callback(sub.unsubscribe)
            registry = PluginRegistry.discover(secrets={"lab": {"identityfile": str(hosts.key_path)}}, work_dir=Path(tmp) / "prov")
            stack.push_async_callback(registry.aclose)
            await start_workers(ncs[4], stack, registry, WorkerConfig(provisioner_id="bench", tenants=("bench",)))
            await apply_catalog(EventStore(nc), "bench", Catalog.model_validate(ONE_NODE_CATALOG))
            await pools.send(nc, "lab", AddHosts(hosts=[spec]))
            client = MusterClient(nc)

            js, seen = nc.jetstream(), asyncio.Queue()  # type: ignore[var-annotated]
            stored_at: dict[tuple[str, str], float] = {}
            """(what, job or cluster id) -> the log's store time of the hops between: the
            pool's grant, the planner's first link (the node's host on the cluster)."""

            async def on_event(msg: Any) -> None:
                r = recorded_from_msg(msg)
                for grant in grants_in(r.event):  # alone, or with the release that made it (HostsReleased v2)
                    stored_at["granted", grant.request_id] = msg.metadata.timestamp.timestamp()
                if r.type == "HostsReleased" or (r.type == "TaskQueued" and r.event.action.value == "create"):
                    # Also the log's own time of it (the server's store time, ns): a figure
                    # free of this process's delays in delivering to the follower.
                    seen.put_nowait((time.perf_counter(), msg.metadata.timestamp.timestamp(), r))
                elif r.type == "NodeResultsRecorded" and any(n.task_id == "pool.grant" for n in r.event.nodes):
                    stored_at["host", r.event.cluster_id] = msg.metadata.timestamp.timestamp()

            for subject in (subjects.pool_events("lab"), "muster.evt.bench.job.*.tasks", "muster.evt.bench.cluster.*"):
                await js.subscribe(subject, ordered_consumer=True, cb=on_event, deliver_policy=DeliverPolicy.NEW)
            rtt = await raw_publish_rtt(js, samples)

            first = await client.run(CreateCluster(name="c0", template="one", nodes=1), tenant="bench", timeout=60)
            held = first.reply.cluster_id
            lat: list[float] = []
            in_log: list[float] = []
            hops: list[tuple[float, float, float]] = []  # release -> grant -> node's host -> TaskQueued, in the log
            for i in range(1, samples + 1):
                waiting = await client.submit(CreateCluster(name=f"c{i}", template="one", nodes=1), tenant="bench")
                assert isinstance(waiting, Accepted)
                freed = freed_stored = None
                gone = await client.submit(DeleteCluster(cluster_id=held), tenant="bench")
                assert isinstance(gone, Accepted)
                while True:  # each turn takes the next event the follower got (no sleeping)
                    at, stored, r = await asyncio.wait_for(seen.get(), 30)
                    if r.type == "HostsReleased":
                        freed, freed_stored = at, stored
                    elif r.event.job_id == waiting.job_id and freed is not None and freed_stored is not None:
                        lat.append(at - freed)
                        in_log.append(stored - freed_stored)
                        break
                await client.wait(gone.job_id, tenant="bench", timeout=60)
                await client.wait(waiting.job_id, tenant="bench", timeout=60)
                granted, host = stored_at.get(("granted", waiting.job_id)), stored_at.get(("host", waiting.cluster_id))
                if granted is not None and host is not None and freed_stored is not None:
                    hops.append((granted - freed_stored, host - granted, freed_stored + in_log[-1] - host))
                held = waiting.cluster_id
    p50_raw, p50 = statistics.median(rtt) * 1e6, statistics.median(lat) * 1e6
    lat.sort()
    # For run_all's goals table (#13.9): the figure next to the raw round trip of this run.
    print(goals.line([goals.Goal("freed host -> waiting job's task queued p50 / raw js.publish p50", round(p50 / p50_raw, 2),
                                 "<=", 3.0, "x")]))
    return [
        ("freed host -> waiting job's create task queued p50", f"{p50:,.0f} µs ({p50 / p50_raw:.1f} x raw; goal 3 x)"),
        ("freed host -> waiting job's create task queued p99", f"{lat[int(len(lat) * PERCENTILE_99)] * 1e6:,.0f} µs"),
        ("the same by the log's own clock (store times of the release and of TaskQueued) p50",
         f"{statistics.median(in_log) * 1e6:,.0f} µs ({statistics.median(in_log) * 1e6 / p50_raw:.1f} x raw)"),
        ("raw js.publish round trip p50 (the limit, this run)", f"{p50_raw:,.0f} µs"),
        ("where it goes, by the log's clock, p50: release -> grant (0: one event, HostsReleased v2) / -> the node's host on the cluster (the planner's first link) / -> TaskQueued",
         " / ".join(f"{statistics.median(h) * 1e6:,.0f} µs" for h in zip(*hops, strict=True)) if hops else "-"),
    ]


ONE_NODE_CATALOG: dict[str, Any] = {
    "providers": {"lab": {"name": "lab", "providertype": "static-pool", "provisioner": {"pool": "lab"}}},
    "hardwaretypes": {"any": {"name": "any", "providermap": {"lab": {"flavor": "host", "requires": ""}}}},
    "imagetypes": {"os": {"name": "os", "providermap": {"lab": {"image": "as-installed"}}}},
    "services": {"noop": {"name": "noop", "provisioner": {"actions": {"install": {"type": "simulated"}}}}},
    "clustertemplates": {"one": {
        "name": "one", "defaults": {"services": ["noop"], "provider": "lab", "hardwaretype": "any", "imagetype": "os"},
        "compatibility": {"services": ["noop"]}, "constraints": {"size": {"min": 1, "max": 1}}}},
}


async def _ask(store: Any, rid: str) -> None:
    from contracts.pools import PoolHostsRequested
    from muster.bus.eventstore import Append

    req = PoolRequest(request_id=rid, pool="bench", tenant="bench", cluster_id=f"c-{rid}", nodes=[NodeNeed(node_id="n0")])
    await store.append(subjects.pool_request_events("bench", "bench", rid), [Append(event=PoolHostsRequested(request=req),
                                                                                     msg_id=f"{rid}-requested")])


def main() -> None:
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--waiting", type=int, default=1_000)
    parser.add_argument("--cycles", type=int, default=2_000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    rows = decisions(args.hosts, args.waiting, args.cycles) + asyncio.run(freed_to_granted(args.samples)) + \
        asyncio.run(freed_to_task_queued(max(5, args.samples // 4)))
    for k, v in rows:
        print(f"{k:55s} {v}")
    if args.write_docs:
        from bench.planner_rebuild_bench import replace_section

        section = "## Pools\n\n" + (
            f"`python bench/pool_bench.py --hosts {args.hosts} --waiting {args.waiting}` on {os.cpu_count()} cores, "
            f"{datetime.now(UTC):%Y-%m-%d}. nats-server and this process share the machine.\n\n"
            "| figure | value |\n|---|---|\n" + "".join(f"| {k} | {v} |\n" for k, v in rows)
        )
        replace_section(Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md", "## Pools", section)


if __name__ == "__main__":
    main()
