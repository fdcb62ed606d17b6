"""Scale benchmark (#14.7): a big cluster created end to end through the real services, planner
takeover after kill -9, and job throughput with 1, 2 and 3 planners. Not a test: run it, read
the table; `--write-docs` puts it into docs/benchmarks.md ("## Scale").

    .venv/bin/python bench/scale_bench.py [--nodes 1000] [--takeover-jobs 6] [--jobs 30] [--write-docs]
    .venv/bin/python bench/scale_bench.py --full [--write-docs]       # the 10,000-node create alone

The defaults finish in a few minutes (`make bench` runs them); `--full` (= `--nodes 10000
--takeover-jobs 0 --jobs 0`) takes tens of minutes and writes its own section ("## Scale: a
10,000-node create"), which a default run leaves alone.

Every part runs real processes (`muster solver|planner|provisioner|tracker`, as `muster up`
starts them) on a nats-server of its own (`sync_interval: always`), the simulated cloud with no
latency, and measures next to the raw figure of the same server in the same run:

- big create: wall time from the request to `JobSucceeded`; tasks/s against the raw acked
  JetStream publish rate (one publisher, 256 in flight); peak memory of each service (the
  kernel's high-water mark, VmHWM, at the end); the largest message on the bus (a wiretap
  subscribed to everything: events, task messages, bodies, KV writes, requests and replies).
- takeover: 3 planners (`--lease-ttl`), clusters in flight; kill -9 the planner with most of
  them; the time until the others hold all shards and until each of its jobs moves again,
  against the TTL.
- throughput: `--jobs` 2-node creates sent at once; jobs/s from the first request to the last
  final event, with 1, 2 and 3 planners (the other services the same).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nats.aio.client import Client  # noqa: E402
from nats.js.api import StorageType, StreamConfig  # noqa: E402

from bench import goals  # noqa: E402
from contracts import subjects  # noqa: E402
from contracts.commands import Accepted, CreateCluster  # noqa: E402
from muster.bus.connect import connect  # noqa: E402
from muster.bus.eventstore import H_TIME, EventStore  # noqa: E402
from muster.bus.server import NatsServer  # noqa: E402
from muster.bus.shards import lease_table  # noqa: E402
from muster.bus.streams import ensure_streams  # noqa: E402
from muster.catalog.files import load_catalog  # noqa: E402
from muster.catalog.store import apply_catalog  # noqa: E402
from muster.client import MusterClient  # noqa: E402
from muster.runtime.supervisor import Deployment  # noqa: E402

DOCS = ROOT / "docs" / "benchmarks.md"
SECTION = "## Scale"
BIG_NODES = 5000
"""A create of at least this many nodes gets a section of its own ("## Scale: a N-node create")."""
DEMO = ROOT / "muster" / "demo" / "catalog"
T = "default"


def catalog(max_nodes: int) -> Any:
    """The demo catalog on a simulated cloud without latency, with a template of `max_nodes`."""
    c = load_catalog(DEMO)
    sim = c.providers["sim"]
    c.providers["sim"] = sim.model_copy(update={"provisioner": {**sim.provisioner, "latency_ms": "0"}})
    small = c.clustertemplates["hadoop-small"]
    c.clustertemplates["hadoop-big"] = small.model_copy(update={"name": "hadoop-big", "constraints": small.constraints.model_copy(
        update={"size": small.constraints.size.model_copy(update={"max": max_nodes})})})
    return c


class Wiretap:
    """Every message on the server, by subject kind: count and largest (body + headers)."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self.largest: dict[str, tuple[int, str]] = {}

    async def on_msg(self, msg: Any) -> None:
        parts = msg.subject.split(".")
        kind = ".".join(parts[:2]) if parts[0] in ("muster", "$KV", "$JS") else parts[0]
        size = len(msg.data or b"") + sum(len(k) + len(v) for k, v in (msg.headers or {}).items())
        self.count[kind] += 1
        if size > self.largest.get(kind, (0, ""))[0]:
            self.largest[kind] = (size, msg.subject)

    def top(self) -> tuple[int, str]:
        return max(self.largest.values(), default=(0, ""))


def accepted(reply: Any) -> Accepted:
    assert isinstance(reply, Accepted), reply
    return reply


def peak_rss_mb(pid: int) -> float:
    """The process's high-water mark of resident memory (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def raw_publish_rate(nc: Client, n: int = 5000, window: int = 256) -> float:
    """Acked JetStream publishes per second on a file stream of this server: the limit every
    event and task message of the run goes through."""
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="RAWBENCH", subjects=["rawbench.>"], storage=StorageType.FILE))
    body = b"x" * 300
    sem = asyncio.Semaphore(window)

    async def one(i: int) -> None:
        async with sem:
            await js.publish(f"rawbench.{i % 16}", body)

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    rate = n / (time.perf_counter() - start)
    await js.delete_stream("RAWBENCH")
    return rate


class Run:
    """One deployment: a server, the services as processes, a client and a wiretap."""

    def __init__(self, base: Path, planners: int, provisioners: int, capacity: int, lease_ttl: float) -> None:
        self.base, self.planners = base, planners
        options: dict[str, list[str]] = {"planner": ["--lease-ttl", str(lease_ttl), "--task-timeout", "3600"],
                                         "provisioner": ["--ack-wait", "30"]}
        for i in range(1, planners + 1):
            if planners == 1:
                options["planner"] += ["--instance", "planner-1"]
            else:
                options[f"planner-{i}"] = ["--instance", f"planner-{i}"]
        for i in range(1, provisioners + 1):
            own = ["--id", f"prov-{i}", "--work-dir", str(base / "work" / f"provisioner-{i}")]
            if provisioners == 1:
                options["provisioner"] += own
            else:
                options[f"provisioner-{i}"] = own
        self.server = NatsServer(base / "nats")
        self.deployment = Deployment(base / "deploy", capacity=capacity, replicas={"planner": planners, "provisioner": provisioners},
                                     extra_args=options)
        self.wiretap = Wiretap()

    async def __aenter__(self) -> Run:
        await self.server.start()
        self.deployment.nats_url = self.server.url
        self.nc = await connect(self.server.url, name="bench")
        await ensure_streams(self.nc.jetstream())
        await self.deployment.start()
        self.client = MusterClient(self.nc, timeout=60)
        await self.nc.subscribe(">", cb=self.wiretap.on_msg, pending_msgs_limit=-1, pending_bytes_limit=-1)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.nc.close()
        await self.deployment.stop()
        await self.server.stop()

    def peaks(self) -> dict[str, float]:
        return {c.name: peak_rss_mb(c.pid) for c in self.deployment.children if c.process.returncode is None}


async def big_create(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    async with Run(base / "big", planners=1, provisioners=args.provisioners, capacity=args.capacity, lease_ttl=10) as run:
        raw = await raw_publish_rate(run.nc)
        await apply_catalog(EventStore(run.nc), T, catalog(args.nodes))
        start = time.perf_counter()
        reply = await run.client.send(T, CreateCluster(name="big", template="hadoop-big", nodes=args.nodes, request_id="big"), timeout=120)
        assert isinstance(reply, Accepted), reply
        final = await run.client.wait(reply.job_id, timeout=args.timeout)
        wall = time.perf_counter() - start
        history = await EventStore(run.nc).read(subjects.job_events(T, reply.job_id))
        tasks = sum(r.type == "TaskCompleted" for r in history)
        raw_after = await raw_publish_rate(run.nc)
        peaks = run.peaks()
        largest, where = run.wiretap.top()
        return {"nodes": args.nodes, "final": final.type, "wall_s": wall, "tasks": tasks, "tasks_per_s": tasks / wall,
                "raw_publish_per_s": (raw + raw_after) / 2, "events": len(history), "peak_mb": peaks,
                "largest_bytes": largest, "largest_subject": re.sub(r"[0-9a-f-]{36}|[0-9a-f]{32,64}", "<id>", where),
                "messages": sum(run.wiretap.count.values()), "by_kind": dict(run.wiretap.count.most_common(8))}


async def first_after(nc: Client, subject: str, seq: int, timeout: float) -> float:
    """Wall time at which the subject's first event after `seq` was decided (a core
    subscription first, so no append is missed, then the log)."""
    first: asyncio.Future[float] = asyncio.get_running_loop().create_future()

    async def on_append(msg: Any) -> None:
        if not first.done():
            first.set_result(datetime.fromisoformat((msg.headers or {})[H_TIME]).timestamp())

    sub = await nc.subscribe(subject, cb=on_append)
    try:
        later = await EventStore(nc).read(subject, start_seq=seq + 1)
        return later[0].time.timestamp() if later else await asyncio.wait_for(first, timeout)
    finally:
        await sub.unsubscribe()


async def takeover(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    async with Run(base / "takeover", planners=3, provisioners=2, capacity=args.capacity, lease_ttl=args.lease_ttl) as run:
        c = catalog(50)
        sim = c.providers["sim"]
        c.providers["sim"] = sim.model_copy(update={"provisioner": {**sim.provisioner, "latency_ms": "200-400"}})
        await apply_catalog(EventStore(run.nc), T, c)
        replies = [accepted(await run.client.request(CreateCluster(name=f"t{i}", template="hadoop-small", nodes=3), tenant=T))
                   for i in range(args.takeover_jobs)]
        store = EventStore(run.nc)
        owners = {r.job_id: (await store.read(subjects.job_events(T, r.job_id)))[0].event.planner for r in replies}
        victim = Counter(owners.values()).most_common(1)[0][0]
        theirs = [r.job_id for r in replies if owners[r.job_id] == victim]
        members, shard_owners = await lease_table(run.nc.jetstream())
        held = [s for s, o in shard_owners.items() if o == victim]
        seqs = {j: await store.last_seq(subjects.job_events(T, j)) for j in theirs}
        killed = time.time()
        await run.deployment.kill(victim)
        moved: asyncio.Future[float] = asyncio.get_running_loop().create_future()

        async def on_lease(msg: Any) -> None:
            _, owners_now = await lease_table(run.nc.jetstream())
            if all(owners_now.get(s) not in (None, victim) for s in held) and not moved.done():
                moved.set_result(time.time() - killed)

        sub = await run.nc.subscribe("$KV.leases.shard.>", cb=on_lease)
        shards_s = await asyncio.wait_for(moved, 10 * args.lease_ttl)
        await sub.unsubscribe()
        resumed = [await first_after(run.nc, subjects.job_events(T, j), seqs[j], 10 * args.lease_ttl) - killed for j in theirs]
        finals = [await run.client.wait(r.job_id, timeout=300) for r in replies]
        return {"ttl_s": args.lease_ttl, "jobs": len(replies), "victim_jobs": len(theirs), "victim_shards": len(held),
                "shards_moved_s": shards_s, "first_progress_s": min(resumed) if resumed else None,
                "last_progress_s": max(resumed) if resumed else None,
                "succeeded": sum(f.type == "JobSucceeded" for f in finals)}


async def throughput(args: argparse.Namespace, base: Path, planners: int) -> dict[str, Any]:
    async with Run(base / f"tp{planners}", planners=planners, provisioners=2, capacity=args.capacity, lease_ttl=10) as run:
        await apply_catalog(EventStore(run.nc), T, catalog(50))
        start = time.perf_counter()
        replies = [accepted(r) for r in await asyncio.gather(*(
            run.client.request(CreateCluster(name=f"j{i}", template="hadoop-small", nodes=2), tenant=T) for i in range(args.jobs)))]
        finals = await asyncio.gather(*(run.client.wait(r.job_id, timeout=600) for r in replies))
        wall = time.perf_counter() - start
        return {"planners": planners, "jobs": args.jobs, "wall_s": wall, "jobs_per_s": args.jobs / wall,
                "succeeded": sum(f.type == "JobSucceeded" for f in finals), "raw_publish_per_s": await raw_publish_rate(run.nc)}


def goals_of(big: dict[str, Any] | None, take: dict[str, Any] | None) -> list[goals.Goal]:
    """#14.7's goals: the planner under 1 GB, no message over 64 KB; #14.6's: a killed
    planner's jobs move again within 2x the lease TTL."""
    out = []
    if big:
        out += [goals.Goal(f"{big['nodes']:,}-node create: planner peak memory", round(big["peak_mb"].get("planner", 0)), "<=", 1024, " MB"),
                goals.Goal(f"{big['nodes']:,}-node create: largest message on the bus", big["largest_bytes"], "<=", 64 * 1024, " bytes")]
    if take and take["last_progress_s"] is not None:
        out.append(goals.Goal("takeover after kill -9: last job moving again", round(take["last_progress_s"], 1), "<=",
                              2 * take["ttl_s"], " s"))
    return out


def big_section(big: dict[str, Any]) -> str:
    return f"## Scale: a {big['nodes']:,}-node create"


def section(title: str, big: dict[str, Any] | None, take: dict[str, Any] | None, tps: list[dict[str, Any]]) -> str:
    lines = [title, "", f"`bench/scale_bench.py`, {time.strftime('%Y-%m-%d')}, real processes on one nats-server "
             "(`sync_interval: always`), the simulated cloud with no latency; measured with other work running on the machine.", ""]
    if big:
        peaks = ", ".join(f"{k} {v:.0f} MB" for k, v in sorted(big["peak_mb"].items()))
        lines += [f"**A {big['nodes']:,}-node create, end to end** ({big['final']}):", "",
                  "| figure | value | raw limit of the same run |", "|---|---|---|",
                  f"| wall time | {big['wall_s']:.0f} s | |",
                  f"| tasks | {big['tasks']:,} ({big['tasks_per_s']:.0f}/s) | {big['raw_publish_per_s']:.0f} acked publishes/s |",
                  f"| events of the job | {big['events']:,} | |",
                  f"| peak memory (VmHWM) | {peaks} | goal: planner < 1 GB |",
                  f"| largest message on the bus | {big['largest_bytes']:,} bytes (`{big['largest_subject']}`) | goal: < 64 KB |",
                  f"| messages on the bus | {big['messages']:,} | |", ""]
    if take:
        lines += [f"**Takeover after kill -9** ({take['jobs']} 3-node creates on 3 planners, the victim had {take['victim_jobs']} "
                  f"jobs and {take['victim_shards']} shards; lease TTL {take['ttl_s']:g} s): shards held by the others after "
                  f"{take['shards_moved_s']:.1f} s; its jobs moved again after {take['first_progress_s']:.1f}–{take['last_progress_s']:.1f} s "
                  f"({take['succeeded']}/{take['jobs']} succeeded).", ""]
    if tps:
        lines += ["**Job throughput** (2-node creates sent at once):", "", "| planners | jobs | wall | jobs/s | raw acked publishes/s |",
                  "|---|---|---|---|---|"]
        lines += [f"| {t['planners']} | {t['jobs']} | {t['wall_s']:.1f} s | {t['jobs_per_s']:.2f} | {t['raw_publish_per_s']:.0f} |" for t in tps]
        lines.append("")
    return "\n".join(lines) + "\n"


def write_docs(title: str, text: str) -> None:
    doc = DOCS.read_text()
    pattern = re.compile(rf"^{re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    DOCS.write_text(pattern.sub(text, doc) if pattern.search(doc) else doc.rstrip("\n") + "\n\n" + text)


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmp:
        base = Path(tmp)
        big = await big_create(args, base) if args.nodes else None
        if big:
            print(json.dumps(big, indent=1), flush=True)
        take = await takeover(args, base) if args.takeover_jobs else None
        if take:
            print(json.dumps(take), flush=True)
        tps = []
        for n in (1, 2, 3) if args.jobs else ():
            tps.append(await throughput(args, base, n))
            print(json.dumps(tps[-1]), flush=True)
    print(goals.line(goals_of(big, take)))
    if big and big["nodes"] >= BIG_NODES:  # a section of its own: a default run leaves it alone
        text = section(big_section(big), big, None, [])
        print(text)
        if args.write_docs:
            write_docs(big_section(big), text)
        big = None
    if big or take or tps:
        text = section(SECTION, big, take, tps)
        print(text)
        if args.write_docs:
            write_docs(SECTION, text)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000, help="nodes of the big create (0: skip)")
    parser.add_argument("--full", action="store_true", help="only the 10,000-node create (tens of minutes; make bench-full)")
    parser.add_argument("--provisioners", type=int, default=2, help="provisioner processes for the big create")
    parser.add_argument("--capacity", type=int, default=64, help="tasks at once per provisioner")
    parser.add_argument("--timeout", type=float, default=7200, help="seconds the big create may take")
    parser.add_argument("--takeover-jobs", type=int, default=6, help="creates in flight when a planner is killed (0: skip)")
    parser.add_argument("--lease-ttl", type=float, default=5.0, help="planners' lease TTL in the takeover part")
    parser.add_argument("--jobs", type=int, default=30, help="creates per throughput run (0: skip)")
    parser.add_argument("--write-docs", action="store_true", help=f"replace '{SECTION}' in docs/benchmarks.md")
    options = parser.parse_args()
    if options.full:
        options.nodes, options.takeover_jobs, options.jobs = 10_000, 0, 0
    asyncio.run(main(options))
