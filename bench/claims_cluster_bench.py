"""Claims on a replicated stream (decision 46): a create's tasks/s on a 3-node cluster against a
single server, with how often a claim was refused because its job's cancel fence was busy. Not
a test: run it, read the table; `--write-docs` puts it into docs/benchmarks.md ("## Claims on a
cluster").

    flock /tmp/muster-heavy.lock .venv/bin/python bench/claims_cluster_bench.py [--nodes 200,1000] \
        [--provisioners 2,4] [--modes single,cluster] [--write-docs]

Every claim of a job expects the job's fence subject (`muster.evt.<t>.job.<job>.claims.<n>`)
empty. On a replicated stream the leader refuses such an expectation while another one on that
subject is being replicated (10164), so one job's claims, from one provisioner or several,
compete for one subject. For each mode (one nats-server, or three with routes on loopback as
tests/fault/test_cluster.py starts them, every stream with 3 replicas) and each number of
provisioners (capacity 64 each), real processes (`muster planner|provisioner|...` as `muster
up` starts them, authorization on) create each size after an uncounted 5-node warm-up, the
simulated cloud without latency. Per create:

- wall time from the request to `JobSucceeded`, and tasks/s (the job's `TaskCompleted`);
- claims published (a core subscription sees refused ones too) against distinct claims;
- the raw acked publish rate of the same servers in the same run (one publisher, 256 in flight,
  on a file stream with as many replicas as muster's);
- claims refused with 10164 ("busy"): JetStream answers carrying that code, seen on the
  inboxes (a wiretap on `_INBOX.>`: each is one refused publish, a single claim or a batch),
  and 10071 ("closed", none expected: nothing is cancelled);
- claims whose fence stayed busy too long (the provisioners' logs: "stayed busy"), each a task given back
  and delivered again, and the claims stored for a delivery after the first (from their keys,
  `<attempt>.claim.<delivery>`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nats.aio.client import Client  # noqa: E402
from nats.errors import TimeoutError as NatsTimeout  # noqa: E402
from nats.js.api import StorageType, StreamConfig  # noqa: E402
from nats.js.errors import BadRequestError  # noqa: E402

from bench.scale_bench import WARM_UP_NODES, catalog  # noqa: E402
from contracts import subjects  # noqa: E402
from contracts.commands import Accepted, CreateCluster  # noqa: E402
from contracts.events import FINAL_JOB_EVENTS  # noqa: E402
from contracts.records import H_MSG_ID, H_TYPE  # noqa: E402
from muster.bus.cluster import ClusterNode, loopback_cluster, start_cluster  # noqa: E402
from muster.bus.connect import connect  # noqa: E402
from muster.bus.eventstore import EventStore  # noqa: E402
from muster.bus.server import NatsServer, free_port  # noqa: E402
from muster.bus.streams import ensure_streams  # noqa: E402
from muster.catalog.store import apply_catalog  # noqa: E402
from muster.client import MusterClient  # noqa: E402
from muster.runtime.supervisor import Deployment  # noqa: E402
from services.auth.bootstrap import SYSTEM_TOKEN_ENV  # noqa: E402
from services.auth.domain.tokens import make_token  # noqa: E402
from services.auth.keys import AuthKeys, server_auth_config  # noqa: E402

DOCS = ROOT / "docs" / "benchmarks.md"
SECTION = "## Claims on a cluster"
T = "default"
PEER_OFFLINE = 10005
EXHAUSTED = "stayed busy"


async def raw_publish_rate(nc: Client, replicas: int, n: int = 3000, window: int = 256) -> float:
    """Acked publishes per second on a file stream with `replicas` (scale_bench's, replicated)."""
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="RAWBENCH", subjects=["rawbench.>"], storage=StorageType.FILE, num_replicas=replicas))
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


async def declare_streams(nc: Client, replicas: int, timeout: float = 60.0) -> None:
    """As tests/fault/harness.create_streams: a young cluster refuses a 3-replica stream until it
    has heard from every peer (10005), and its first stream may outlast a request's timeout."""

    async def until_declared() -> None:
        while True:
            try:
                await ensure_streams(nc.jetstream(), replicas=replicas)
                return
            except NatsTimeout:
                continue
            except BadRequestError as err:
                if err.err_code != PEER_OFFLINE:
                    raise
            await asyncio.sleep(0.2)  # a bounded retry of one declaration, under the deadline

    await asyncio.wait_for(until_declared(), timeout)


class Counts:
    """JetStream answers by error code (on the inboxes) and claims by delivery (on the task
    records' subjects), from a core subscription of the bench's own."""

    def __init__(self) -> None:
        self.busy = self.closed = self.published = 0
        self.keys: set[str] = set()

    def reset(self) -> None:
        self.busy = self.closed = self.published = 0
        self.keys.clear()

    @property
    def again(self) -> int:
        """Claims for a delivery after the first (a core subscription sees every publish, refused
        or not: these are distinct keys, `<attempt>.claim.<delivery>`)."""
        return sum(1 for key in self.keys if (got := re.search(r"\.claim\.(\d+)$", key)) and int(got.group(1)) > 1)

    async def on_inbox(self, msg: Any) -> None:
        if b'"err_code"' in msg.data[:200]:
            self.busy += b'"err_code":10164' in msg.data
            self.closed += b'"err_code":10071' in msg.data

    async def on_task(self, msg: Any) -> None:
        headers = msg.headers or {}
        if headers.get(H_TYPE) == "TaskClaimed":
            self.published += 1
            self.keys.add(headers.get(H_MSG_ID, ""))


class Run:
    """Servers (one, or a 3-node loopback cluster), the services as processes, a client with a
    system token and the counters' subscriptions."""

    def __init__(self, base: Path, mode: str, provisioners: int, capacity: int) -> None:
        self.base, self.mode, self.replicas = base, mode, 3 if mode == "cluster" else 1
        keys = AuthKeys.load_or_create(base / "auth")
        auth = server_auth_config(keys.issuer_public, keys.bus_secret)
        self.server = NatsServer(base / "nats", auth=auth) if mode == "single" else None
        self.nodes: list[ClusterNode] = (loopback_cluster(base / "nats", [(free_port(), free_port()) for _ in range(3)], auth=auth)
                                         if mode == "cluster" else [])
        options: dict[str, list[str]] = {"planner": ["--task-timeout", "3600"], "provisioner": ["--ack-wait", "30"]}
        for i in range(1, provisioners + 1):
            options[f"provisioner-{i}" if provisioners > 1 else "provisioner"] = [
                "--id", f"prov-{i}", "--work-dir", str(base / "work" / f"provisioner-{i}")]
        self.deployment = Deployment(base / "deploy", capacity=capacity, replicas={"provisioner": provisioners},
                                     extra_args=options, auth_dir=base / "auth", start_timeout_s=120)
        self.token = make_token("claims-bench", os.urandom(6), os.urandom(32), os.urandom(16))[0]
        self.counts = Counts()

    async def __aenter__(self) -> Run:
        os.environ[SYSTEM_TOKEN_ENV] = self.token
        os.environ["MUSTER_REPLICAS"] = str(self.replicas)  # the services' streams, as compose sets it
        if self.server is not None:
            await self.server.start()
            url = self.server.url
        else:
            url = await start_cluster(self.nodes)
        self.deployment.nats_url = url
        await self.deployment.start_auth()
        self.nc = await connect(url, name="bench", token=self.token)
        await declare_streams(self.nc, self.replicas)
        await self.deployment.start()
        self.client = MusterClient(self.nc, timeout=60)
        await self.nc.subscribe("_INBOX.>", cb=self.counts.on_inbox, pending_msgs_limit=-1, pending_bytes_limit=-1)
        await self.nc.subscribe(f"{subjects.EVT}.{T}.task.>", cb=self.counts.on_task, pending_msgs_limit=-1,
                                pending_bytes_limit=-1)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.nc.close()
        await self.deployment.stop()
        for server in [self.server, *self.nodes]:
            if server is not None:
                await server.stop()

    def exhausted(self) -> int:
        """Claims out of tries so far, from the provisioners' logs."""
        return sum(p.read_text(errors="replace").count(EXHAUSTED) for p in (self.base / "deploy" / "logs").glob("provisioner*.log"))


async def create_and_wait(run: Run, nodes: int, name: str, timeout: float) -> tuple[str, int]:
    """Send the create; its final event's type and the tasks it completed (a core subscription
    on the job's subjects)."""
    final: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    completed = 0

    async def on_event(msg: Any) -> None:
        nonlocal completed
        kind = (msg.headers or {}).get(H_TYPE, "")
        completed += kind == "TaskCompleted"
        if kind in FINAL_JOB_EVENTS and not final.done():
            final.set_result(kind)

    sub = await run.nc.subscribe(f"{subjects.EVT}.{T}.job.>", cb=on_event, pending_msgs_limit=-1, pending_bytes_limit=-1)
    try:
        reply = await run.client.send(T, CreateCluster(name=name, template="hadoop-big", nodes=nodes, request_id=name), timeout=120)
        assert isinstance(reply, Accepted), reply
        return await asyncio.wait_for(final, timeout), completed
    finally:
        await sub.unsubscribe()


async def writers_only(args: argparse.Namespace, base: Path, mode: str, provisioners: int, claims: int) -> dict[str, Any]:
    """The log's writers alone, no services (`--writers`): `provisioners` connections, each an
    `EventStore` as a provisioner has (group commit), keeping `capacity` tasks of one job going:
    a claim on the job's fence (`now`, as the worker sends it), then its outcome; `claims` in
    all. Each claim's failure is counted as the worker would meet it."""
    from contracts.events import TaskClaimed, TaskSucceeded
    from contracts.records import Append

    replicas = 3 if mode == "cluster" else 1
    nodes = loopback_cluster(base / "nats", [(free_port(), free_port()) for _ in range(3)]) if mode == "cluster" else []
    server = NatsServer(base / "nats") if mode == "single" else None
    url = (await server.start()).url if server is not None else await start_cluster(nodes)
    conns = [await connect(url, name=f"provisioner-{p}") for p in range(provisioners)]
    counts = Counts()
    try:
        await declare_streams(conns[0], replicas)
        raw = await raw_publish_rate(conns[0], replicas)
        await conns[0].subscribe("_INBOX.>", cb=counts.on_inbox, pending_msgs_limit=-1, pending_bytes_limit=-1)
        stores = [EventStore(c) for c in conns]
        fence, job = f"{subjects.EVT}.{T}.job.j.claims.0", "j"
        left = iter(range(claims))
        failed: dict[str, int] = {}

        async def slot(p: int) -> None:
            for i in left:
                subject = f"{subjects.EVT}.{T}.task.{job}.n{i}~create.p{p}"
                claim = TaskClaimed(job_id=job, task_id=f"n{i}.create", attempt=1, provisioner=f"p{p}", worker=f"p{p}/w")
                try:
                    await stores[p].submit(subject, Append(claim, msg_id=f"{job}.n{i}.1.claim.1", only_if_empty=fence), now=True)
                except Exception as err:  # noqa: BLE001 - counted, as the worker gives the task back
                    kind = EXHAUSTED if EXHAUSTED in str(err) else type(err).__name__
                    failed[kind] = failed.get(kind, 0) + 1
                    continue
                done = TaskSucceeded(job_id=job, task_id=f"n{i}.create", attempt=1, provisioner=f"p{p}", worker=f"p{p}/w")
                await stores[p].submit(subject, Append(done, msg_id=f"{job}.n{i}.1.outcome"))

        start = time.perf_counter()
        await asyncio.gather(*(slot(p) for p in range(provisioners) for _ in range(args.capacity)))
        wall = time.perf_counter() - start
        await conns[0].flush()
        row = {"mode": mode, "provisioners": provisioners, "claims": claims, "wall_s": wall,
               "claims_per_s": (claims - sum(failed.values())) / wall, "busy": counts.busy, "closed": counts.closed,
               "exhausted": failed.get(EXHAUSTED, 0), "failed": failed, "raw_publish_per_s": raw}
        print(json.dumps(row), flush=True)
        return row
    finally:
        for c in conns:
            await c.close()
        for s in [server, *nodes]:
            if s is not None:
                await s.stop()


async def one_deployment(args: argparse.Namespace, base: Path, mode: str, provisioners: int) -> list[dict[str, Any]]:
    out = []
    async with Run(base, mode, provisioners, args.capacity) as run:
        raw = await raw_publish_rate(run.nc, run.replicas)
        await apply_catalog(EventStore(run.nc), T, catalog(max(args.nodes)))
        await create_and_wait(run, WARM_UP_NODES, "warm-up", args.timeout)  # (not counted)
        for nodes in args.nodes:
            run.counts.reset()
            exhausted = run.exhausted()
            start = time.perf_counter()
            final, tasks = await create_and_wait(run, nodes, f"big{nodes}", args.timeout)
            wall = time.perf_counter() - start
            c = run.counts
            out.append({"mode": mode, "provisioners": provisioners, "nodes": nodes, "final": final, "wall_s": wall,
                        "tasks": tasks, "tasks_per_s": tasks / wall, "claims_sent": c.published, "claims": len(c.keys),
                        "busy": c.busy, "closed": c.closed,
                        "exhausted": run.exhausted() - exhausted, "claims_again": c.again, "raw_publish_per_s": raw})
            print(json.dumps(out[-1]), flush=True)
    return out


def section(rows: list[dict[str, Any]], label: str) -> str:
    lines = [SECTION, "", f"`bench/claims_cluster_bench.py`, {time.strftime('%Y-%m-%d %H:%M')}{label}: real processes "
             "(authorization on, one planner, provisioners of capacity 64, the simulated cloud with no latency) on one "
             "nats-server or on a 3-node loopback cluster (every stream 3 replicas), `sync_interval: always`. Tasks/s "
             "counts the job's `TaskCompleted` from the request to `JobSucceeded`; \"claims sent\" every publish of a "
             "claim (refused ones too) against the distinct claims; \"busy\" is JetStream answers refusing "
             "a publish with 10164 (a single claim or a batch of them: another write expecting the job's fence "
             "subject was being replicated); \"out of tries\" is claims given back because their fence stayed busy "
             "(\"stayed busy\" in the provisioners' logs: 8 tries before decision 50, 5 s since; the task delivered "
             "again), \"again\" the claims stored for a second delivery.", "",
             "| servers | provisioners | nodes | wall | tasks/s | claims sent / distinct | busy (10164) | out of tries | claimed again | raw acked publishes/s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['mode']} | {r['provisioners']} | {r['nodes']:,} | {r['wall_s']:.1f} s | {r['tasks_per_s']:.0f} | "
              f"{r['claims_sent']:,} / {r['claims']:,} | {r['busy']:,} | "
              f"{r['exhausted']:,} | {r['claims_again']:,} | {r['raw_publish_per_s']:.0f} |" for r in rows]
    return "\n".join(lines) + "\n"


def write_docs(text: str) -> None:
    doc = DOCS.read_text()
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    DOCS.write_text(pattern.sub(lambda _: text, doc) if pattern.search(doc) else doc.rstrip("\n") + "\n\n" + text)


def writers_section(rows: list[dict[str, Any]], label: str) -> str:
    lines = [f"**The writers alone** (`--writers`{label}: no services; each provisioner a connection with its "
             "`EventStore`, keeping 64 tasks of one job going, a claim on the job's fence then its outcome):", "",
             "| servers | provisioners | claims | wall | claims/s | busy (10164) | out of tries | raw acked publishes/s |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['mode']} | {r['provisioners']} | {r['claims']:,} | {r['wall_s']:.1f} s | {r['claims_per_s']:.0f} | "
              f"{r['busy']:,} | {r['exhausted']:,} | {r['raw_publish_per_s']:.0f} |" for r in rows]
    return "\n".join(lines) + "\n"


async def main(args: argparse.Namespace) -> None:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="claims-bench-") as tmp:
        if args.writers:
            for mode in args.modes:
                for provisioners in args.provisioners:
                    for claims in args.nodes:
                        base = Path(tmp) / f"w-{mode}-{provisioners}-{claims}"
                        base.mkdir()
                        rows.append(await writers_only(args, base, mode, provisioners, claims))
            print(writers_section(rows, f", {args.label}" if args.label else ""))
            return
        for mode in args.modes:
            for provisioners in args.provisioners:
                base = Path(tmp) / f"{mode}-{provisioners}"
                base.mkdir()
                rows += await one_deployment(args, base, mode, provisioners)
    text = section(rows, f" ({args.label})" if args.label else "")
    print(text)
    if args.write_docs:
        write_docs(text)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="200,1000", help="sizes of the creates, comma-separated")
    parser.add_argument("--provisioners", default="2,4", help="provisioner processes, comma-separated (a deployment each)")
    parser.add_argument("--modes", default="single,cluster", help="single and/or cluster")
    parser.add_argument("--capacity", type=int, default=64, help="tasks at once per provisioner")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds a create may take")
    parser.add_argument("--label", default="", help="said in the section's first line (what code ran)")
    parser.add_argument("--writers", action="store_true", help="the log's writers alone, no services (--nodes: claims)")
    parser.add_argument("--write-docs", action="store_true", help=f"replace '{SECTION}' in docs/benchmarks.md")
    options = parser.parse_args()
    options.nodes = [int(n) for n in options.nodes.split(",") if n.strip()]
    options.provisioners = [int(n) for n in options.provisioners.split(",") if n.strip()]
    options.modes = [m for m in options.modes.split(",") if m.strip()]
    asyncio.run(main(options))
