"""Console benchmark: a job page in the test browser (Debian's chromium driven by Playwright),
1,000 tasks by default and 110,000 (a 10,000-node create) with `--tasks 1000 110000`, and the page
under a stream of task updates. Not a test: figures are printed, not asserted (docs/ui.md;
targets: first paint under 2 s at 110,000 tasks, the DOM bounded, responsive under updates).

    .venv/bin/python bench/console_bench.py [--tasks 1000 [110000] | --full] [--repeat 5] [--rate 100] [--seconds 10] [--write-docs]

Real parts, on loopback: a nats-server from the wheel, the tracker as its own process
(`python -m muster tracker`), chromium. The job is written to the log as a planner would write
it (requested, planned: the demo's hadoop-small on `--nodes` nodes, ~11 tasks a node), so the
page reads and folds a real history. Measured:

1. Render: from navigation start to the HTML received (the tracker's work: read the job's events,
   fold them, render), to first paint, to DOMContentLoaded (the summary and the task table
   usable), and to the task graph drawn (small jobs: layout by elkjs in a web worker, then SVG;
   large ones: the groups by stage the server drew, live). Median of `--repeat` cold loads; the
   DOM's element count. The raw figure: the same page fetched by aiohttp (the tracker's first
   read of the job after it started apart: it reads the whole history; later ones read what the
   log added since, for a large job).
2. Live: with the page open, `--rate` task updates a second for `--seconds` (each one event that
   changes a task: queued, claimed, succeeded, taken into the job) appended to the log. Measured in
   the page: how late each update is applied (append -> the page applied a batch covering its log
   sequence), whether the job's counts on screen match the log at the end, frame gaps and long
   tasks (the main thread busy > 50 ms), and how long a trivial script takes to answer from
   outside (`page.evaluate`), sampled every 100 ms — the page's responsiveness to input.
`--write-docs` replaces the "## Console" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
from playwright.async_api import TimeoutError as PlaywrightTimeout
from playwright.async_api import async_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


from contracts import subjects  # noqa: E402
from contracts.events import JobPlanned, JobRequested, PlannedTaskRecord, TaskClaimed, TaskCompleted, TaskQueued, TaskSucceeded  # noqa: E402
from contracts.layout import NodeSpec  # noqa: E402
from muster.bus.connect import connect  # noqa: E402
from muster.bus.eventstore import Append, EventStore  # noqa: E402
from muster.bus.server import NatsServer, free_port  # noqa: E402
from muster.bus.streams import ensure_streams  # noqa: E402
from muster.catalog.files import load_catalog  # noqa: E402
from services.planner.domain.plan import build_plan  # noqa: E402

DOCS = ROOT / "docs" / "benchmarks.md"
CHROMIUM = "/usr/bin/chromium"
TENANT = "bench"
COOKIE = {"Cookie": f"muster_tenant={TENANT}"}  # the console's tenant, as the sign-in page sets it
ARGS = ["--no-sandbox", "--headless=new", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--disable-extensions"]

PROBES = """() => {
  window.benchFrames = []; window.benchLong = [];
  let last = performance.now();
  const frame = (t) => { window.benchFrames.push(t - last); last = t; requestAnimationFrame(frame); };
  requestAnimationFrame(frame);
  new PerformanceObserver((l) => { for (const e of l.getEntries()) window.benchLong.push(e.duration); }).observe({entryTypes: ['longtask']});
}"""


def _p(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def demo_cluster(size: int) -> tuple[dict[str, Any], list[NodeSpec]]:
    """The demo's hadoop-small layout: zookeeper on one node, namenode and resourcemanager on
    another, datanode + nodemanager on the rest, base everywhere (as bench/planner_bench.py)."""
    services = load_catalog(ROOT / "muster" / "demo" / "catalog").services
    layouts = [["base", "zookeeper-server"], ["base", "hdfs-namenode", "yarn-resourcemanager"]]
    layouts += [["base", "hdfs-datanode", "yarn-nodemanager"]] * (size - 2)
    return services, [NodeSpec(id=f"n{i:03d}", hardwaretype="medium", imagetype="ubuntu22", services=s) for i, s in enumerate(layouts)]


async def write_job(store: EventStore, nodes: int) -> tuple[str, list[Any]]:
    """A planned create job of the demo layout on `nodes` nodes: requested and planned, nothing
    run yet. Returns its id and its tasks in dispatch order (stage by stage)."""
    services, specs = demo_cluster(nodes)
    plan = build_plan(services, specs, "create")
    job_id, cluster_id = str(uuid.uuid4()), str(uuid.uuid4())
    requested = JobRequested(tenant=TENANT, job_id=job_id, cluster_id=cluster_id, operation="create",
                             request={"template": "hadoop-small", "nodes": nodes}, requested_by="bench", planner="bench")
    planned = JobPlanned(job_id=job_id, tasks=[PlannedTaskRecord(id=t.id, node=t.node, action=t.action, service=t.service) for t in plan.tasks],
                         links=[(list(s), list(t)) for s, t in plan.links], stages=[list(s) for s in plan.stages], nodes=specs)
    subject = subjects.job_events(TENANT, job_id)
    await store.append(subject, [Append(requested, f"{job_id}:1", job_id, 1)], expect_last_seq=0)
    await store.append(subject, [Append(planned, f"{job_id}:2", job_id, 2)])
    by_id = {t.id: t for t in plan.tasks}
    return job_id, [by_id[t] for stage in plan.stages for t in stage]


async def start_tracker(nats_url: str, port: int) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "muster", "tracker", "--nats-url", nats_url, "--port", str(port),
                                                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, cwd=ROOT)
    async with aiohttp.ClientSession() as http:
        for _ in range(200):
            try:
                async with http.get(f"http://127.0.0.1:{port}/healthz") as resp:
                    if resp.status == 200:
                        return proc
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)  # a bench waiting for a process to listen, not a service loop
    raise RuntimeError("the tracker did not start")


MEASURE = """() => { const n = performance.getEntriesByType('navigation')[0];
    const m = (name) => { const e = performance.getEntriesByName(name); return e.length ? e[e.length - 1].startTime : NaN; };
    const fcp = performance.getEntriesByName('first-contentful-paint');
    return {html: n.responseEnd, dom: n.domContentLoadedEventEnd, paint: fcp.length ? fcp[0].startTime : NaN, graph: window.musterGraphReadyAt, arranged: window.musterGraphLaidOutAt,
            layout: m('layout-end') - m('layout-start'), chips: document.querySelectorAll('.chip').length,
            groups: document.querySelectorAll('.agg-group').length, nodes: document.getElementsByTagName('*').length,
            svg: document.querySelectorAll('#graph svg *').length, rows: document.querySelectorAll('#tasks tbody tr').length}; }"""


async def render(browser: Any, url: str, repeat: int) -> dict[str, dict[str, float]]:
    """Median figures of `repeat` loads in a new browser context (nothing cached), and of a
    reload in the same context (the scripts cached, as for a second visit)."""
    cold: list[dict[str, float]] = []
    warm: list[dict[str, float]] = []
    for _ in range(repeat):
        context = await browser.new_context(viewport={"width": 1280, "height": 900}, extra_http_headers=COOKIE,
                                            bypass_csp=True)  # its waits evaluate expressions, which the console's CSP refuses
        page = await context.new_page()
        for rows in (cold, warm):
            if rows is cold:
                await page.goto(url)
            else:
                await page.reload()
            await page.wait_for_function("window.musterGraphLaidOut > 0", timeout=60_000)
            rows.append(await page.evaluate(MEASURE))
        await context.close()
    return {name: {k: _median([r[k] for r in rows]) for k in rows[0]} for name, rows in (("cold", cold), ("warm", warm))}


def _median(values: list[float]) -> float:
    """Of the loads that have the figure (a reload may record no first-contentful-paint)."""
    present = [v for v in values if v == v]
    return statistics.median(present) if present else float("nan")


async def live(browser: Any, url: str, store: EventStore, job_id: str, tasks: list[Any], rate: float, seconds: float) -> dict[str, Any]:
    context = await browser.new_context(viewport={"width": 1280, "height": 900}, extra_http_headers=COOKIE,
                                        bypass_csp=True)  # its waits evaluate expressions, which the console's CSP refuses
    page = await context.new_page()
    await page.goto(url)
    await page.wait_for_function("window.musterGraphReady > 0", timeout=60_000)
    await page.wait_for_function("document.getElementById('live').classList.contains('on')", timeout=60_000)
    await page.evaluate(PROBES)
    sent: list[tuple[int, float]] = []  # (log sequence, appended at: ms since the epoch)
    latest: dict[str, str] = {}
    answers: list[float] = []
    stop = asyncio.Event()

    async def probe() -> None:
        while not stop.is_set():
            t = time.perf_counter()
            await page.evaluate("1")
            answers.append((time.perf_counter() - t) * 1000)
            await asyncio.sleep(0.1)  # sampling interval of the probe (bench-side, not the product)

    async def publish() -> int:
        steps = []
        for t in tasks:
            steps += [("queued", t), ("claimed", t), ("succeeded-loc", t), ("succeeded", t)]
        n = int(rate * seconds)
        start = time.perf_counter()
        task_subject = lambda t: subjects.task_events(TENANT, job_id, t.id, "bench")  # noqa: E731
        job_subject = subjects.job_events(TENANT, job_id)
        version = 2
        for i, (what, t) in enumerate(steps[:n]):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)  # pacing the load generator
            if what == "queued":
                version += 1
                event: Any = TaskQueued(job_id=job_id, task_id=t.id, attempt=1, node=t.node, action=t.action, service=t.service)
                seqs = await store.append(job_subject, [Append(event, f"{job_id}:{version}", job_id, version)])
            elif what == "claimed":
                seqs = await store.append(task_subject(t), [Append(TaskClaimed(job_id=job_id, task_id=t.id, attempt=1, provisioner="bench", worker="bench/w1"), f"c:{t.id}")])
            elif what == "succeeded-loc":
                seqs = await store.append(task_subject(t), [Append(TaskSucceeded(job_id=job_id, task_id=t.id, attempt=1, provisioner="bench", worker="bench/w1"), f"s:{t.id}")])
            else:
                version += 1
                seqs = await store.append(job_subject, [Append(TaskCompleted(job_id=job_id, task_id=t.id, attempt=1), f"{job_id}:{version}", job_id, version)])
            sent.append((seqs[-1], time.time() * 1000))
            latest[t.id] = {"succeeded-loc": "queued"}.get(what, what)  # (an outcome not yet taken into the job shows as queued)
        return n

    prober = asyncio.create_task(probe())
    t0 = time.perf_counter()
    n = await publish()
    took = time.perf_counter() - t0
    counts = Counter(latest.values())
    counts["planned"] = len(tasks) - len(latest)
    expected = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()) if n) + f" (of {len(tasks)})"
    last_seq = sent[-1][0]
    with contextlib.suppress(PlaywrightTimeout):  # then the figures below show what was missed
        await page.wait_for_function(f"(window.musterApplied || []).some((a) => a[0] >= {last_seq})", timeout=60_000)
    stop.set()
    await prober
    applied, frames, longs, shown = await page.evaluate("[window.musterApplied || [], window.benchFrames, window.benchLong, "
                                                        "document.getElementById('job-counts').textContent]")
    await context.close()
    lags = []
    for seq, at in sent:
        when = next((t for s, t in applied if s >= seq), None)
        if when is not None:
            lags.append(when - at)
    return {"updates": n, "rate": n / took, "applied": len(lags), "batches": len(applied), "counts_ok": shown == expected,
            "counts_shown": shown, "counts_expected": expected, "lag_p50": _p(lags, 0.5), "lag_p99": _p(lags, 0.99),
            "lag_max": max(lags) if lags else float("nan"), "frame_p99": _p(frames, 0.99), "frame_max": max(frames) if frames else float("nan"),
            "long_tasks": len(longs), "long_ms": sum(longs), "answer_p50": _p(answers, 0.5), "answer_p99": _p(answers, 0.99),
            "answer_max": max(answers) if answers else float("nan")}


async def bench(nodes: int, repeat: int, rate: float, seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        async with NatsServer(Path(tmp) / "nats") as server:
            nc = await connect(server.url, name="console-bench")
            await ensure_streams(nc.jetstream())
            store = EventStore(nc)
            job_id, tasks = await write_job(store, nodes)
            port = free_port()
            tracker = await start_tracker(server.url, port)
            try:
                url = f"http://127.0.0.1:{port}/ui/jobs/{job_id}"
                async with aiohttp.ClientSession(headers=COOKIE) as http:
                    server_ms, size = [], 0
                    for _ in range(repeat + 1):
                        t = time.perf_counter()
                        async with http.get(url) as resp:
                            size = len(await resp.read())
                        server_ms.append((time.perf_counter() - t) * 1000)
                async with async_playwright() as p:
                    browser = await p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                    try:
                        r = await render(browser, url, repeat)
                        lv = await live(browser, url, store, job_id, tasks, rate, seconds)
                    finally:
                        await browser.close()
            finally:
                tracker.terminate()
                await tracker.wait()
                await nc.close()
    return {"tasks": len(tasks), "nodes": nodes, "server_first": server_ms[0], "server_ms": statistics.median(server_ms[1:]),
            "html_kb": size / 1024, "render": r, "live": lv}


def report(runs: list[dict[str, Any]], repeat: int, rate: float, seconds: float) -> str:
    sizes = " and ".join(f"{x['tasks']:,}-task ({x['nodes']:,} nodes)" for x in runs)
    out = [
        "## Console",
        "",
        f"`bench/console_bench.py --tasks {' '.join(str(x['asked']) for x in runs)} --rate {rate:g}`: the job page of a {sizes} create job "
        f"(the demo layout) in Debian's chromium (headless, Playwright), served by the tracker as its own process on a nats-server "
        f"from the wheel, {platform.machine()}, {os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f} at the end). Render: "
        f"median of {repeat} loads from navigation start, in a new browser context (first visit: nothing cached) and reloaded in it "
        f"(again: scripts cached). Live: {rate:g} task updates/s for {seconds:g} s appended to the log while the page is open. "
        "Targets (docs/ui.md): first paint under 2 s and the DOM bounded at 110,000 tasks; responsive under updates. Above 2,000 "
        "tasks the page shows the graph as one group per stage with counts and the tasks a page at a time, and its stream is "
        "coalesced by the tracker (docs/ui.md, \"Large jobs\").",
        "",
    ]
    for x in runs:
        c, w, lv = x["render"]["cold"], x["render"]["warm"], x["live"]
        big = c["groups"] > 0
        graph = (f"{int(c['groups'])} groups by stage, {int(c['chips'])} chips" if big else f"{int(c['chips'])} chips, {int(c['svg'])} SVG elements")
        arranged = ("| graph arranged | no layout to run: the groups are in plan order | |" if big else
                    f"| graph arranged by elkjs (in its web worker), first visit / again | {c['arranged']:.0f} / {w['arranged']:.0f} ms | the layout itself: {c['layout']:.0f} / {w['layout']:.0f} ms |")
        out += [
            f"**{x['tasks']:,} tasks** ({x['nodes']:,} nodes)",
            "",
            "| measure | value | raw (same run) |",
            "|---|---|---|",
            f"| job page HTML received, first visit / again | {c['html']:.0f} / {w['html']:.0f} ms | {x['server_ms']:.0f} ms: the same page fetched by aiohttp ({x['html_kb']:.0f} KB); the tracker's first read of the job: {x['server_first']:.0f} ms |",
            f"| first paint, first visit / again | {c['paint']:.0f} / {w['paint']:.0f} ms | |",
            f"| page parsed, scripts run (DOMContentLoaded), first visit / again | {c['dom']:.0f} / {w['dom']:.0f} ms | {int(c['rows'])} table rows |",
            f"| DOM elements | {int(c['nodes']):,} | {x['tasks']:,} tasks |",
            f"| task graph drawn, first visit / again | {c['graph']:.0f} / {w['graph']:.0f} ms | {graph} |",
            arranged,
            f"| job's counts on screen after the updates match the log | {'yes' if lv['counts_ok'] else 'no: ' + lv['counts_shown'] + ' against ' + lv['counts_expected']} | {lv['rate']:.0f} updates/s sent |",
            f"| update lag, append to applied on the page, p50 / p99 / max | {lv['lag_p50']:.0f} / {lv['lag_p99']:.0f} / {lv['lag_max']:.0f} ms | {lv['applied']} of {lv['updates']} updates seen applied, in {lv['batches']} batches |",
            f"| page answers a script from outside, p50 / p99 / max | {lv['answer_p50']:.1f} / {lv['answer_p99']:.1f} / {lv['answer_max']:.1f} ms | sampled every 100 ms under load |",
            f"| frame gap p99 / max | {lv['frame_p99']:.0f} / {lv['frame_max']:.0f} ms | 17 ms is 60 frames/s |",
            f"| long tasks (main thread busy > 50 ms) | {lv['long_tasks']} ({lv['long_ms']:.0f} ms in all) | |",
            "",
        ]
    return "\n".join(out)


def write_docs(section: str, path: Path = DOCS) -> None:
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    pattern = re.compile(r"^## Console\n.*?(?=^## |\Z)", re.S | re.M)
    section = section.rstrip("\n") + "\n\n"
    text = pattern.sub(lambda _: section, text, count=1) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    path.write_text(text.rstrip("\n") + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, nargs="+", default=[1000], help="tasks of the job, one run each (about 11 a node: 1000 -> 91 nodes)")
    parser.add_argument("--repeat", type=int, default=5, help="cold page loads to take the median of")
    parser.add_argument("--rate", type=float, default=100.0, help="task updates per second while the page is open")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long the updates go on")
    parser.add_argument("--full", action="store_true", help="the issue's sizes: --tasks 1000 110000 (a 10,000-node create)")
    parser.add_argument("--write-docs", action="store_true", help="update the Console section of docs/benchmarks.md")
    args = parser.parse_args()
    if args.full:
        args.tasks = [1000, 110000]
    if not Path(CHROMIUM).exists():
        print("console_bench: needs the Debian package chromium (deploy/system-deps.sh installs it); skipped")
        return
    runs = [{**asyncio.run(bench(max(3, round(n / 11)), args.repeat, args.rate, args.seconds)), "asked": n} for n in args.tasks]
    section = report(runs, args.repeat, args.rate, args.seconds)
    print(section)
    if args.write_docs:
        write_docs(section)


if __name__ == "__main__":
    main()
