"""Scale benchmark (#14.7): a big cluster created end to end through the real services, planner
takeover after kill -9, and job throughput with 1, 2 and 3 planners. Not a test: run it, read
the table; `--write-docs` puts it into docs/benchmarks.md ("## Scale").

    .venv/bin/python bench/scale_bench.py [--nodes 1000] [--takeover-jobs 6] [--jobs 30] [--write-docs]
    .venv/bin/python bench/scale_bench.py --full [--write-docs]       # the curve to 10,000 nodes alone
    .venv/bin/python bench/scale_bench.py --nodes 100,1000 --takeover-jobs 0 --jobs 0   # the curve's medians alone
    .venv/bin/python bench/scale_bench.py --nodes 100,1000 --repeat 1 --takeover-jobs 0 --jobs 0 --small 0 --server-profile

The defaults finish in a few minutes (`make bench` runs them); `--full` (= `--nodes 100,1000,10000
--takeover-jobs 0 --jobs 0`) takes tens of minutes and writes its own section ("## Scale: a
10,000-node create"), which a default run leaves alone.

Every part runs real processes (`muster solver|planner|provisioner|tracker`, as `muster up`
starts them) on a nats-server of its own (`sync_interval: always`), the simulated cloud with no
latency, and measures next to the raw figure of the same server in the same run:

- big create: wall time from the request to `JobSucceeded`; tasks/s against the raw acked
  JetStream publish rate (one publisher, 256 in flight); peak memory of each service (the
  kernel's high-water mark, VmHWM, at the end); the largest message on the bus (a wiretap
  subscribed to everything: events, task messages, bodies, KV writes, requests and replies).
  Stores per task by writer: atomic batches (and the events in them), single appends and chain
  links, told by the batch headers the wiretap sees (`attribution.write_of`): nats-server pays
  ~1.1 ms of CPU a batch and a disk sync a single append, whatever they carry.
- `--repeat N` (3 unless told): each size N times on fresh processes, sizes alternating; the
  tables show the run of median CPU per task, and list every run's CPU per task, tasks/s and
  raw rate (the flat-CPU goal is judged on the medians: one run's figure moves by a fifth on
  this machine, so `make bench` and `make bench-full` print the median of three).
- takeover: 3 planners (`--lease-ttl`), clusters in flight; kill -9 the planner with most of
  them; the time until the others hold all shards and until each of its jobs moves again,
  against the TTL.
- `--server-profile`: nats-server's own Go CPU profile during each create, by part and by
  function, and its counters (JetStream API calls, connections, consumers) before and after
  (`bench/server_profile.py`; `--profile-dir` keeps each run as `server-<nodes>-<round>.json`).
- `--store-trace DIR`: the sequence of each create's stores (the wiretap's, grouped into the
  server's stores: an atomic batch is one), as JSON, to see a create's waves; for the `--small`
  creates together also every message of the account in order (`messages-small-*.json`: time,
  kind, subject, event type, bytes), what a create sends whatever its size.
- `--profile PROCESS` (`--profile-rate`, samples a second): py-spy on one service during each
  create, and over the `--small` creates together: those are nearly all fixed cost (a stage
  of one or two tasks), so their profile shows what a wave costs whatever its width.
- throughput: `--jobs` 2-node creates sent at once; jobs/s from the first request to the last
  final event, with 1, 2 and 3 planners (the other services the same).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
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

from bench import goals, profile, server_profile  # noqa: E402
from bench.attribution import Meter, Wiretap, connections, delta, stores_of  # noqa: E402
from contracts import subjects  # noqa: E402
from contracts.commands import Accepted, CreateCluster  # noqa: E402
from contracts.events import FINAL_JOB_EVENTS  # noqa: E402
from contracts.records import H_TYPE  # noqa: E402
from muster.bus import snapshotstore  # noqa: E402
from muster.bus.connect import connect  # noqa: E402
from muster.bus.eventstore import H_TIME, EventStore  # noqa: E402
from muster.bus.server import NatsServer, free_port  # noqa: E402
from muster.bus.shards import lease_table  # noqa: E402
from muster.bus.wire import raw_subscribe  # noqa: E402
from muster.catalog.files import load_catalog  # noqa: E402
from muster.catalog.store import apply_catalog  # noqa: E402
from muster.client import MusterClient  # noqa: E402
from muster.readmodel.story import STORY  # noqa: E402
from muster.runtime.supervisor import Deployment  # noqa: E402
from services.auth.bootstrap import SYSTEM_TOKEN_ENV  # noqa: E402
from services.auth.domain.tokens import make_token  # noqa: E402
from services.auth.keys import AuthKeys, server_auth_config  # noqa: E402
from services.tracker.story import EVERY_TASKS, MOST_TASKS  # noqa: E402

DOCS = ROOT / "docs" / "benchmarks.md"
SECTION = "## Scale"
FULL_SECTION = "## Scale: 100 to 10,000 nodes"
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


def accepted(reply: Any) -> Accepted:
    assert isinstance(reply, Accepted), reply
    return reply


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
    """One deployment with authorization on: a server (its monitoring endpoint on), the auth
    service and the others as processes, a client with a system token, and a wiretap."""

    def __init__(self, base: Path, planners: int, provisioners: int, capacity: int, lease_ttl: float,
                 profile_server: bool = False) -> None:
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
        keys = AuthKeys.load_or_create(base / "auth")
        self.monitor = free_port()
        self.prof_port = free_port() if profile_server else None
        self.server = ProfiledServer(base / "nats", auth=server_auth_config(keys.issuer_public, keys.bus_secret), http_port=self.monitor,
                                     prof_port=self.prof_port)
        self.deployment = Deployment(base / "deploy", capacity=capacity, replicas={"planner": planners, "provisioner": provisioners},
                                     extra_args=options, auth_dir=base / "auth")
        self.wiretap = Wiretap()
        self.token = make_token("scale-bench", os.urandom(6), os.urandom(32), os.urandom(16))[0]

    @property
    def monitor_url(self) -> str:
        return f"http://127.0.0.1:{self.monitor}"

    async def __aenter__(self) -> Run:
        os.environ[SYSTEM_TOKEN_ENV] = self.token  # the auth service registers it as a system service
        await self.server.start()
        self.deployment.nats_url = self.server.url
        await self.deployment.start()
        self.nc = await connect(self.server.url, name="bench", token=self.token)
        self.client = MusterClient(self.nc, timeout=60)
        await raw_subscribe(self.nc, ">", self.wiretap.on_raw)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.nc.close()
        await self.deployment.stop()
        await self.server.stop()

    def meter(self) -> Meter:
        assert self.server.process is not None
        pids = {c.name: c.pid for c in self.deployment.children if c.process.returncode is None}
        return Meter({**pids, "nats-server": self.server.process.pid})


class ProfiledServer(NatsServer):
    """The server, with its Go profiler on `prof_port` (127.0.0.1) when given one."""

    def __init__(self, *args: Any, prof_port: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prof_port = prof_port

    def config_text(self) -> str:
        return super().config_text() + (f"prof_port: {self.prof_port}\n" if self.prof_port else "")


WARM_UP_NODES = 5
STORY_WAIT_S = 30.0


async def create_and_wait(run: Run, nodes: int, timeout: float, name: str = "") -> tuple[str, Counter[str], str]:
    """Send the create and wait for its final event, watching the job's subject with a core
    subscription (no consumer of our own on the bus). Returns the final event's type, the
    job's events by type and the cluster's id."""
    types: Counter[str] = Counter()
    final: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def on_event(msg: Any) -> None:
        kind = (msg.headers or {}).get(H_TYPE, "")
        types[kind] += 1
        if kind in FINAL_JOB_EVENTS and not final.done():
            final.set_result(kind)

    # (`job.>`: the job's own events and its task records, docs/decisions/0033)
    sub = await run.nc.subscribe(f"{subjects.EVT}.{T}.job.>", cb=on_event, pending_msgs_limit=-1, pending_bytes_limit=-1)
    try:
        name = name or f"big{nodes}"
        reply = await run.client.send(T, CreateCluster(name=name, template="hadoop-big", nodes=nodes, request_id=name),
                                      timeout=120)
        assert isinstance(reply, Accepted), reply
        return await asyncio.wait_for(final, timeout), types, reply.cluster_id
    finally:
        await sub.unsubscribe()


async def caught_up(run: Run, timeout: float) -> dict[str, int]:
    """Wait until every durable consumer of the log has taken and acked all it was given (the
    tracker's and the planner's may lag behind the job's end); returns what each still had to
    take at the first look. Looks again when an ack leaves every durable consumer with nothing
    delivered and unacked (`Wiretap.balanced`; asking after every ack was itself a share of a
    small create's traffic)."""
    js = run.nc.jetstream()
    first: dict[str, int] | None = None
    async with asyncio.timeout(timeout):
        while True:
            infos = await js.consumers_info(subjects.EVENTS_STREAM)
            left = {c.name: (c.num_pending or 0) + (c.num_ack_pending or 0) for c in infos if c.config.durable_name}
            first = left if first is None else first
            if not any(left.values()):
                return {k: v for k, v in first.items() if v}
            await run.wiretap.balanced()


async def big_create(args: argparse.Namespace, base: Path, nodes: int) -> dict[str, Any]:
    async with Run(base / f"big{nodes}", planners=1, provisioners=args.provisioners, capacity=args.capacity, lease_ttl=10,
                   profile_server=args.server_profile) as run:
        raw = await raw_publish_rate(run.nc)
        await apply_catalog(EventStore(run.nc), T, catalog(nodes))
        # A small create first, not counted: what a fresh process pays once (building each
        # contract's validator on first use, opening consumers and buckets) is not a cost of
        # the create measured, which is what a deployment that has been up a while pays.
        await create_and_wait(run, WARM_UP_NODES, args.timeout, name="warm-up")
        await caught_up(run, args.timeout)
        meter = run.meter()
        before = await connections(run.monitor_url)
        run.wiretap.reset()
        if args.store_trace:
            run.wiretap.trace_stores()
        recording = profile.Recording(meter.pids[args.profile], base / f"profile-{nodes}.txt", rate=args.profile_rate) if args.profile else None
        if recording is not None:
            await recording.start()
        probe = server_profile.ServerProbe(f"http://127.0.0.1:{run.prof_port}", run.monitor_url) if run.prof_port else None
        if probe is not None:
            await probe.start()
        meter.start()
        start = time.perf_counter()
        final, types, cluster = await create_and_wait(run, nodes, args.timeout)
        wall = time.perf_counter() - start
        behind = await caught_up(run, args.timeout)  # CPU and messages count the consumers' lag too
        story = await story_written(run, types["TaskCompleted"], cluster)  # and the tracker's work after the job
        settled = time.perf_counter() - start
        cpu = meter.stop()
        if recording is not None:
            await recording.stop()
        if probe is not None:
            await probe.stop()
        counts, sizes, writes = dict(run.wiretap.count), dict(run.wiretap.bytes), dict(run.wiretap.writes)
        if run.wiretap.trace is not None:
            Path(args.store_trace).mkdir(parents=True, exist_ok=True)
            stores = stores_of(run.wiretap.trace)
            (Path(args.store_trace) / f"stores-{nodes}-{base.name}.json").write_text(json.dumps(stores, indent=0))
            run.wiretap.trace = None
        per_connection = delta(await connections(run.monitor_url), before)
        per_connection.pop("bench", None)
        raw_after = await raw_publish_rate(run.nc)
        tasks = types["TaskCompleted"]
        largest, where = run.wiretap.largest
        return {"nodes": nodes, "final": final, "wall_s": wall, "settled_s": settled, "behind_at_final": behind, "tasks": tasks, "tasks_per_s": tasks / wall,
                "raw_publish_per_s": (raw + raw_after) / 2, "events": sum(types.values()), "peak_mb": meter.peaks(),
                "cpu_s": cpu, "cpu_ms_per_task": 1000 * sum(cpu.values()) / max(tasks, 1),
                "messages": sum(counts.values()), "messages_per_task": sum(counts.values()) / max(tasks, 1),
                "bytes_per_task": sum(sizes.values()) / max(tasks, 1),
                "by_kind": dict(Counter(counts).most_common()), "bytes_by_kind": sizes, "writes": writes, "connections": per_connection,
                "story_snapshot": story, "largest_bytes": largest, "largest_subject": re.sub(r"[0-9a-f-]{36}|[0-9a-f]{32,64}", "<id>", where),
                **({"profile": profiled(args, recording.out)} if recording is not None else {}),
                **({"server_profile": {"windows": probe.windows, "counters": probe.counters,
                                       "stacks": {";".join(k): v for k, v in probe.profile.items()}}} if probe is not None else {})}


async def story_written(run: Run, tasks: int, cluster: str) -> bool:
    """Until the tracker has written the cluster's story snapshot, if the job's end is one it
    writes (decisions 10 and 46: the first job of a new cluster only when it ran `EVERY_TASKS`
    tasks, and a job of more than `MOST_TASKS` never), by reading the job's whole story: a
    cost of the create, counted with it. False if it wrote none."""
    if not EVERY_TASKS <= tasks <= MOST_TASKS:
        return False
    try:
        await run.wiretap.seen(f"$KV.{snapshotstore.BUCKET}.{snapshotstore.key(STORY.name, T, cluster)}", STORY_WAIT_S)
    except TimeoutError:
        return False  # too large after all (the tracker's log says so)
    return True


SMALL_NODES = 2
SMALL_KINDS = 12
"""The kinds of message a small create's line names (the wiretap's, most frequent first)."""


async def small_creates(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    """What a create costs whatever its size: `--small` creates of 2 nodes one after the other
    on one deployment (after the uncounted warm-up), each counted as a big one is (to its
    final event, the consumers caught up and the story snapshot written)."""
    async with Run(base / "small", planners=1, provisioners=args.provisioners, capacity=args.capacity, lease_ttl=10) as run:
        await apply_catalog(EventStore(run.nc), T, catalog(WARM_UP_NODES))
        await create_and_wait(run, WARM_UP_NODES, args.timeout, name="warm-up")
        await caught_up(run, args.timeout)
        meter = run.meter()
        run.wiretap.reset()
        recording = profile.Recording(meter.pids[args.profile], base / "profile-small.txt", rate=args.profile_rate) if args.profile else None
        if recording is not None:
            await recording.start()
        if args.store_trace:
            run.wiretap.trace_stores()
            run.wiretap.trace_messages()
        meter.start()
        tasks = 0
        for i in range(args.small):
            _, types, cluster = await create_and_wait(run, SMALL_NODES, args.timeout, name=f"small{i}")
            await caught_up(run, args.timeout)
            await story_written(run, types["TaskCompleted"], cluster)
            tasks += types["TaskCompleted"]
        cpu = meter.stop()
        if recording is not None:
            await recording.stop()
        if run.wiretap.trace is not None and run.wiretap.messages is not None:
            Path(args.store_trace).mkdir(parents=True, exist_ok=True)
            (Path(args.store_trace) / f"stores-small-{base.name}.json").write_text(json.dumps(stores_of(run.wiretap.trace), indent=0))
            (Path(args.store_trace) / f"messages-small-{base.name}.json").write_text(json.dumps(run.wiretap.messages, indent=0))
            run.wiretap.trace = run.wiretap.messages = None
        return {**({"profile": profiled(args, recording.out)} if recording is not None else {}), "creates": args.small, "nodes": SMALL_NODES, "tasks": tasks, "cpu_s": cpu,
                "cpu_ms_per_create": 1000 * sum(cpu.values()) / args.small,
                "messages_per_create": sum(run.wiretap.count.values()) / args.small,
                "by_kind_per_create": {k: round(v / args.small, 1) for k, v in Counter(run.wiretap.count).most_common()},
                "writes_per_create": {k: round(v / args.small, 1) for k, v in sorted(run.wiretap.writes.items())}}


def small_lines(small: dict[str, Any], curve: list[dict[str, Any]]) -> list[str]:
    """The small creates, and the CPU of a create split into a part per create and a part per
    task (a line through the 2-node and the 1,000-node figures)."""
    per_create, tasks, n = small["cpu_ms_per_create"], small["tasks"] / small["creates"], small["creates"]
    by_process = ", ".join(f"{k} {1000 * v / n:.0f}" for k, v in sorted(small["cpu_s"].items(), key=lambda kv: -kv[1]) if v)
    lines = ["", f"**What a create costs whatever its size**: {n} creates of {small['nodes']} nodes "
             f"({tasks:.0f} tasks each) one after the other on one deployment: {per_create:.0f} ms of CPU "
             f"({by_process}) and {small['messages_per_create']:.0f} bus messages a create."]
    kinds = list(small.get("by_kind_per_create", {}).items())[:SMALL_KINDS]
    if kinds:
        lines += ["Its most frequent messages, a create: " + ", ".join(f"{k} {v:.0f}" for k, v in kinds) + "."]
    if small.get("writes_per_create"):
        lines += ["Its stores, a create: " + ", ".join(f"{k} {v:g}" for k, v in small["writes_per_create"].items()) + "."]
    big = next((b for b in curve if b["nodes"] == 1000), None)
    if big is not None:
        slope = (big["cpu_ms_per_task"] * big["tasks"] - per_create) / (big["tasks"] - tasks)
        fixed = per_create - slope * tasks
        lines += [f"A line through that and the 1,000-node create: {fixed:.0f} ms a create plus {slope:.2f} ms a task; "
                  + "; ".join(f"at {b['nodes']:,} nodes that predicts {(fixed + slope * b['tasks']) / b['tasks']:.2f} ms a task "
                              f"(measured {b['cpu_ms_per_task']:.2f})" for b in curve) + "."]
    return lines + [""]


def profiled(args: argparse.Namespace, path: Path) -> dict[str, Any]:
    """The profile's summary (and its file kept in `--profile-dir`, the run's own is temporary)."""
    if args.profile_dir:
        Path(args.profile_dir).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(args.profile_dir) / path.name)
    samples, working, cumulative, own = profile.summary(path, top=args.profile_top)
    return {"process": args.profile, "samples": samples, "working": working, "cumulative": [vars(line) for line in cumulative],
            "own": [vars(line) for line in own]}


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


MSGS_PER_TASK = 12
CPU_FLAT = 1.25
TRACKER_MB, PLANNER_MB = 300, 500


def goals_of(curve: list[dict[str, Any]], take: dict[str, Any] | None) -> list[goals.Goal]:
    """#32's goals (each next to the raw figure of its run), #14.7's (the planner under 1 GB, no
    message over 64 KB) and #14.6's (a killed planner's jobs move again within 2x the TTL)."""
    out = []
    for big in curve:
        n = f"{big['nodes']:,}-node create"
        if big["nodes"] == 1000:
            out.append(goals.Goal(f"{n}: tasks/s / raw acked publishes/s", round(big["tasks_per_s"] / big["raw_publish_per_s"], 2),
                                  ">=", 0.33, "x"))
        if big["nodes"] >= 10_000:
            out += [goals.Goal(f"{n}: wall time, every service on this machine", round(big["wall_s"]), "<=", 300, " s"),
                    goals.Goal(f"{n}: tracker peak memory", round(big["peak_mb"].get("tracker", 0)), "<=", TRACKER_MB, " MB"),
                    goals.Goal(f"{n}: planner peak memory", round(big["peak_mb"].get("planner", 0)), "<=", PLANNER_MB, " MB")]
        else:
            out.append(goals.Goal(f"{n}: planner peak memory", round(big["peak_mb"].get("planner", 0)), "<=", 1024, " MB"))
        out += [goals.Goal(f"{n}: bus messages per task", round(big["messages_per_task"], 1), "<=", MSGS_PER_TASK),
                goals.Goal(f"{n}: largest message on the bus", big["largest_bytes"], "<=", 64 * 1024, " bytes")]
    if len(curve) > 1:
        cpu = [b["cpu_ms_per_task"] for b in curve]
        sizes = f"{curve[0]['nodes']:,} to {curve[-1]['nodes']:,} nodes"
        out.append(goals.Goal(f"CPU per task, largest / smallest, {sizes}", round(max(cpu) / min(cpu), 2), "<=", CPU_FLAT, "x"))
    if take and take["last_progress_s"] is not None:
        out.append(goals.Goal("takeover after kill -9: last job moving again", round(take["last_progress_s"], 1), "<=",
                              2 * take["ttl_s"], " s"))
    return out


def curve_lines(curve: list[dict[str, Any]]) -> list[str]:
    """The curve (tasks/s, CPU/task, messages/task by size), then where each size's CPU,
    messages and memory went."""
    lines = ["| nodes | final | wall | settled | tasks | tasks/s | raw acked publishes/s | ratio | CPU ms/task "
             "| messages/task | bytes/task |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {b['nodes']:,} | {b['final']} | {b['wall_s']:.0f} s | {b['settled_s']:.0f} s | {b['tasks']:,} | {b['tasks_per_s']:.0f} | "
              f"{b['raw_publish_per_s']:.0f} | {b['tasks_per_s'] / b['raw_publish_per_s']:.2f}x | {b['cpu_ms_per_task']:.2f} | "
              f"{b['messages_per_task']:.1f} | {b['bytes_per_task']:,.0f} |" for b in curve]
    if any(len(b.get("repeats", [])) > 1 for b in curve):
        lines += ["", "Each size ran more than once (`--repeat`, sizes alternating, fresh processes each time); the "
                  "tables show the run of median CPU per task. Every run, CPU ms/task (tasks/s, raw acked publishes/s):", "",
                  "| nodes | median CPU ms/task | spread | runs |", "|---|---|---|---|"]
        lines += [f"| {b['nodes']:,} | {b['cpu_ms_per_task']:.2f} | {min(r['cpu_ms_per_task'] for r in b['repeats']):.2f}"
                  f"-{max(r['cpu_ms_per_task'] for r in b['repeats']):.2f} | "
                  + ", ".join(f"{r['cpu_ms_per_task']:.2f} ({r['tasks_per_s']:.0f}, {r['raw_publish_per_s']:.0f})" for r in b["repeats"])
                  + " |" for b in curve]
    names = sorted({k for b in curve for k in b["cpu_s"]}, key=lambda k: -curve[-1]["cpu_s"].get(k, 0))
    head = " | ".join(f"{b['nodes']:,} nodes" for b in curve)
    lines += ["", "CPU per process, seconds (µs per task):", "", f"| process | {head} |", "|---|" + "---|" * len(curve)]
    lines += [f"| {k} | " + " | ".join(f"{b['cpu_s'].get(k, 0):.1f} ({1e6 * b['cpu_s'].get(k, 0) / max(b['tasks'], 1):.0f})"
                                       for b in curve) + " |" for k in names]
    kinds = sorted({k for b in curve for k, n in b["by_kind"].items() if n >= 0.01 * b["tasks"]},
                   key=lambda k: -curve[-1]["by_kind"].get(k, 0))
    lines += ["", "Bus messages per task by kind (the wiretap; kinds under 0.01 a task left out), and bytes per task:", "", f"| kind | {head} |", "|---|" + "---|" * len(curve)]
    lines += [f"| {k} | " + " | ".join(f"{b['by_kind'].get(k, 0) / max(b['tasks'], 1):.2f} ({b['bytes_by_kind'].get(k, 0) / max(b['tasks'], 1):.0f} B)"
                                       for b in curve) + " |" for k in kinds]
    writers = sorted({k.rsplit(" ", 1)[0] for b in curve for k in b.get("writes", {})})
    lines += ["", "Stores per task by writer (the wiretap, by the batch headers): atomic batches (events in them), "
              "single appends and chain links:", "", f"| writer | {head} |", "|---|" + "---|" * len(curve)]
    lines += [f"| {w} | " + " | ".join(f"{b['writes'].get(f'{w} batches', 0) / max(b['tasks'], 1):.3f} "
                                       f"({b['writes'].get(f'{w} batched', 0) / max(b['tasks'], 1):.2f}), "
                                       f"{b['writes'].get(f'{w} singles', 0) / max(b['tasks'], 1):.3f}" for b in curve) + " |"
              for w in writers]
    conns = sorted({k for b in curve for k in b["connections"]})
    lines += ["", "Messages per task each connection sent / was sent (the server's `/connz`, by connection name):", "",
              f"| connection | {head} |", "|---|" + "---|" * len(curve)]
    lines += [f"| {k} | " + " | ".join(f"{b['connections'].get(k, {}).get('in_msgs', 0) / max(b['tasks'], 1):.2f} / "
                                       f"{b['connections'].get(k, {}).get('out_msgs', 0) / max(b['tasks'], 1):.2f}" for b in curve) + " |"
              for k in conns]
    lines += ["", "Peak memory (VmHWM), MB:", "", f"| process | {head} |", "|---|" + "---|" * len(curve)]
    lines += [f"| {k} | " + " | ".join(f"{b['peak_mb'].get(k, 0):.0f}" for b in curve) + " |" for k in names]
    largest = max(curve, key=lambda b: b["largest_bytes"])
    lines += ["", f"Largest message on the bus: {largest['largest_bytes']:,} bytes (`{largest['largest_subject']}`).", ""]
    return lines


def section(title: str, curve: list[dict[str, Any]], take: dict[str, Any] | None, tps: list[dict[str, Any]],
            small: dict[str, Any] | None = None) -> str:
    lines = [title, "", f"`bench/scale_bench.py`, {time.strftime('%Y-%m-%d %H:%M')}, real processes on one nats-server "
             "(`sync_interval: always`) with authorization on (the auth service answers the callout, every service its "
             "own identity), the simulated cloud with no latency, one planner, "
             "two provisioners of capacity 64. Each create is timed from the request to its final event; CPU, messages "
             "and bytes are counted until every durable consumer of the log has also taken what it was given, "
             "so a consumer's lag is in them, and until the tracker has written the "
             "cluster's story snapshot if the job's end is one it writes, which reads the job's whole story (decision 43: "
             f"once {EVERY_TASKS:,} tasks ran since the cluster was made or last snapshotted, so none of these creates; a job of "
             f"more than {MOST_TASKS:,} tasks never: its story does not fit the store): \"settled\". Each size runs on processes of its own, after a "
             f"{WARM_UP_NODES}-node create that is not counted (what a fresh process pays once, such as building each "
             "contract's validator on first use, is not a cost of the create).", ""]
    if curve:
        sizes = ", ".join(f"{b['nodes']:,}" for b in curve)
        lines += [f"**Creates, end to end** ({sizes} nodes):", "", *curve_lines(curve)]
    if small:
        lines += small_lines(small, curve)
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
    DOCS.write_text(pattern.sub(lambda _: text, doc) if pattern.search(doc) else doc.rstrip("\n") + "\n\n" + text)


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median CPU per task (the lower of the two middle ones), with every run's
    figures beside it (`repeats`): one create's CPU per task moves by a fifth between runs of
    the same code on this shared machine, more than the 25 % the flat-CPU goal allows."""
    ordered = sorted(runs, key=lambda b: b["cpu_ms_per_task"])
    middle = dict(ordered[(len(ordered) - 1) // 2])
    middle["repeats"] = [{k: b[k] for k in ("cpu_ms_per_task", "tasks_per_s", "raw_publish_per_s", "wall_s", "messages_per_task")}
                         for b in runs]
    return middle


async def main(args: argparse.Namespace) -> None:
    curve: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmp:
        base = Path(tmp)
        runs: dict[int, list[dict[str, Any]]] = {n: [] for n in args.nodes}
        for r in range(args.repeat):  # sizes alternate, so a slow spell of the machine falls on each
            (base / f"round{r}").mkdir()
            for nodes in args.nodes:
                runs[nodes].append(await big_create(args, base / f"round{r}", nodes))
                shutil.rmtree(base / f"round{r}" / f"big{nodes}", ignore_errors=True)  # (a 10,000-node log is GBs)
                shown = {k: v for k, v in runs[nodes][-1].items() if k != "server_profile"}
                print(json.dumps(shown, indent=1), flush=True)
                if "server_profile" in runs[nodes][-1]:
                    print("\n".join(server_profile.lines(runs[nodes][-1]["server_profile"], runs[nodes][-1]["tasks"])), flush=True)
                    if args.profile_dir:
                        Path(args.profile_dir).mkdir(parents=True, exist_ok=True)
                        (Path(args.profile_dir) / f"server-{nodes}-{r}.json").write_text(json.dumps(runs[nodes][-1]))
                if "profile" in runs[nodes][-1]:
                    print("\n".join(profile.lines(runs[nodes][-1])), flush=True)
        curve = [median_run(runs[n]) for n in args.nodes] if args.repeat > 1 else [runs[n][0] for n in args.nodes if runs[n]]
        small = await small_creates(args, base) if args.small and curve else None
        if small:
            print(json.dumps(small), flush=True)
            if "profile" in small:
                print("\n".join(profile.lines(small)), flush=True)
        take = await takeover(args, base) if args.takeover_jobs else None
        if take:
            print(json.dumps(take), flush=True)
        tps = []
        for n in (1, 2, 3) if args.jobs else ():
            tps.append(await throughput(args, base, n))
            print(json.dumps(tps[-1]), flush=True)
    print(goals.line(goals_of(curve, take)))
    title = FULL_SECTION if args.full else SECTION  # a default run leaves the full curve alone
    if curve or take or tps:
        text = section(title, curve, take, tps, small)
        print(text)
        if args.write_docs:
            write_docs(title, text)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="100,1000", help="sizes of the creates, comma-separated (empty: none)")
    parser.add_argument("--full", action="store_true", help="the curve to 10,000 nodes alone (make bench-full)")
    # Three by default: `make bench` prints the flat-CPU goal's ratio, and one run's figure moves
    # by a fifth between runs of the same code, more than the 25 % the goal allows.
    parser.add_argument("--repeat", type=int, default=3, help="creates of each size, sizes alternating, each on "
                        "processes of its own; the tables show the run of median CPU per task and list every run "
                        "(1: one run of each)")
    parser.add_argument("--provisioners", type=int, default=2, help="provisioner processes for the creates")
    parser.add_argument("--capacity", type=int, default=64, help="tasks at once per provisioner")
    parser.add_argument("--timeout", type=float, default=7200, help="seconds a create may take")
    parser.add_argument("--takeover-jobs", type=int, default=6, help="creates in flight when a planner is killed (0: skip)")
    parser.add_argument("--lease-ttl", type=float, default=5.0, help="planners' lease TTL in the takeover part")
    parser.add_argument("--jobs", type=int, default=30, help="creates per throughput run (0: skip)")
    parser.add_argument("--small", type=int, default=10, help="2-node creates in a row after the curve: what a create "
                        "costs whatever its size (0: skip)")
    parser.add_argument("--profile", metavar="PROCESS", help="record a py-spy profile of this process (planner, tracker...) "
                        "during each create, and over the --small creates together (where a create's cost "
                        "whatever its width goes: profile-small.txt), and print where its samples fall")
    parser.add_argument("--server-profile", action="store_true", help="nats-server's own CPU profile (Go pprof) and "
                        "counters (/varz, /jsz) during each create, printed by function (bench/server_profile.py)")
    parser.add_argument("--profile-dir", help="keep the profiles here (profile-<nodes>.txt: collapsed stacks; "
                        "server-<nodes>-<round>.json: the run with nats-server's profile)")
    parser.add_argument("--store-trace", metavar="DIR", help="write every store of each create, in order (time, writer, "
                        "atomic batch or not, its size and event types), to DIR/stores-<nodes>-<round>.json; the --small "
                        "creates' stores and every message of theirs to DIR/stores-small-*.json and messages-small-*.json")
    parser.add_argument("--profile-rate", type=int, default=100, help="py-spy samples a second (--profile)")
    parser.add_argument("--profile-top", type=int, default=25, help="functions shown per profile")
    parser.add_argument("--write-docs", action="store_true", help=f"replace '{SECTION}' (with --full: '{FULL_SECTION}') in docs/benchmarks.md")
    options = parser.parse_args()
    if options.full:
        options.nodes, options.takeover_jobs, options.jobs = "100,1000,10000", 0, 0
    options.nodes = [int(n) for n in str(options.nodes).split(",") if n.strip() and int(n)]
    asyncio.run(main(options))
