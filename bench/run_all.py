"""Run every benchmark in bench/ and put the figures in one place: docs/benchmarks.md.

    .venv/bin/python bench/run_all.py [--quick | --full] [--only NAME ...] [--no-docs] [--strict]   (make bench)

Sizes: by default every script runs at its own default sizes, chosen so that each finishes within
about 5 minutes on this machine (2 cores) and the whole run within about half an hour. `--full`
passes `--full` to the scripts that list it (the sizes an issue names: e.g. the resume bench's
log of 10 million events, 15-30 minutes here) and lifts the per-script limit;
`make bench-full` runs that. `--quick` gives smaller sizes still.

1. Measures the raw limits of this machine in this run: a nats-server from the wheel
   (`sync_interval: always`, file storage) — `js.publish` round trip, core request/reply, an
   ordered-consumer replay, a durable pull consumer's fetch + ack — and aiohttp (a trivial JSON
   handler on loopback).
2. Runs each `bench/*.py` script as a process, one after another (they would compete for the 2
   cores otherwise), with `--write-docs` where the script has it (it rewrites its own `## ...`
   section). `--quick` gives smaller sizes (only options the script's `--help` lists) and then
   leaves the scripts' sections alone: quick figures only go into the summary.
3. Writes the top of docs/benchmarks.md: the machine (cores, memory, CPU), the date, the raw
   limits of step 1 and where each script's figures are: its own section, or (scripts without
   `--write-docs`, a failed run, a `--quick` run) its output kept there verbatim.

4. Collects the goals the scripts state (`bench/goals.py`: a `GOALS {...}` line) and puts a
   "Goals" table first, misses first, and prints `GOAL MISSED: ...` for each: a regression
   guard that is not a timed test. `--strict` makes a miss the exit status (3).
5. Keeps each script's peak resident size (from `wait4`).

Nothing here is a test: no figure is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import goals  # noqa: E402 - importable once the repository root is on the path

DOCS = ROOT / "docs" / "benchmarks.md"
BEGIN = "<!-- summary: written by bench/run_all.py; the sections below belong to their scripts -->"
END = "<!-- end of summary -->"
SCRIPT_TIMEOUT_S = 600
"""A script still running after this is killed (its defaults are meant to take ~5 minutes at most)."""
FULL_TIMEOUT_S = 4 * 3600
"""The same with --full (generous: the 10-million-event resume bench takes 15-30 minutes here)."""

QUICK: dict[str, list[str]] = {
    "solver_bench.py": ["--repeat", "3"],
    "planner_bench.py": ["--seeds", "5"],
    "planner_rebuild_bench.py": ["--events", "100000", "--repeat", "1"],
    "fold_cpu_bench.py": ["--events", "30000"],
    "planner_resume_bench.py": ["--clusters", "200", "--steps", "50000,150000"],
    "planner_wide_bench.py": ["--tasks", "2000", "--outcomes", "200"],
    "dispatch_bench.py": ["--samples", "200", "--tasks", "2000"],
    "ssh_bench.py": ["--tasks", "50", "--commands", "100"],
    "namespaces_bench.py": ["--nodes", "3"],
    "tracker_bench.py": ["--seconds", "2", "--repeat", "1"],
    "auth_bench.py": ["--samples", "100", "--seconds", "2", "--rounds", "1"],
    "pool_bench.py": ["--hosts", "1000", "--waiting", "100", "--cycles", "300", "--samples", "40"],
    "console_bench.py": ["--tasks", "220", "--repeat", "1", "--seconds", "3"],
    "scale_bench.py": ["--nodes", "200", "--repeat", "1", "--takeover-jobs", "3", "--jobs", "10"],
    "replay_bench.py": ["--events", "30000", "--clusters", "3"],
    "step_reads_bench.py": ["--noise", "2000", "--asks", "50"],
}
"""Smaller sizes for --quick, per script (an option the script does not list is left out)."""

LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d[ T]\d\d:\d\d|\{\"|\[|GOALS )")
"""Log lines a script's libraries print (structlog, JSON): not figures."""


# -- the machine ----------------------------------------------------------------------------------


def machine() -> dict[str, str]:
    mem = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ""
    try:
        load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        pass
    return {
        "cores": str(os.cpu_count() or "?"), "memory": mem, "cpu": cpu, "load": load,
        "python": platform.python_version(), "os": f"{platform.system()} {platform.release()}",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


# -- raw limits -----------------------------------------------------------------------------------


@dataclass
class Raw:
    figures: dict[str, tuple[float, str]] = field(default_factory=dict)
    """name -> (value, unit)"""

    def text(self, name: str) -> str:
        if name not in self.figures:
            return "—"
        value, unit = self.figures[name]
        return f"{_fmt(value)} {unit}"


def _fmt(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _p50_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


async def measure_raw(quick: bool) -> Raw:
    import aiohttp
    from aiohttp import web
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StreamConfig

    from muster.bus.connect import connect
    from muster.bus.server import NatsServer, free_port

    raw = Raw()
    n = 500 if quick else 2000
    replay_n = 20_000 if quick else 100_000
    payload = b"x" * 200
    with tempfile.TemporaryDirectory(prefix="muster-raw-") as tmp:
        async with NatsServer(Path(tmp)) as server:
            pub = await connect(server.url, name="raw-pub")
            sub = await connect(server.url, name="raw-sub")
            js = pub.jetstream()
            try:
                await js.add_stream(StreamConfig(name="RAW", subjects=["raw.>"]))
                rtt = []
                started = time.perf_counter()
                for _ in range(n):
                    t = time.perf_counter()
                    await js.publish("raw.pub", payload)
                    rtt.append(time.perf_counter() - t)
                raw.figures["js.publish round trip p50"] = (_p50_us(rtt), "µs")
                raw.figures["js.publish sequential"] = (n / (time.perf_counter() - started), "msg/s")

                async def respond(msg: Any) -> None:
                    await msg.respond(msg.data)

                await sub.subscribe("raw.echo", cb=respond)
                await sub.flush()
                rr = []
                for _ in range(n):
                    t = time.perf_counter()
                    await pub.request("raw.echo", payload, timeout=5)
                    rr.append(time.perf_counter() - t)
                raw.figures["core request/reply p50"] = (_p50_us(rr), "µs")

                for _ in range(0, replay_n, 1000):
                    for _ in range(1000):
                        await js.publish_async("raw.log", payload)
                    await js.publish_async_completed()
                done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                count = 0

                async def on_msg(msg: Any) -> None:
                    nonlocal count
                    count += 1
                    if count == replay_n and not done.done():
                        done.set_result(None)

                started = time.perf_counter()
                ordered = await sub.jetstream().subscribe("raw.log", ordered_consumer=True, cb=on_msg,
                                                          deliver_policy=DeliverPolicy.ALL,
                                                          pending_msgs_limit=-1, pending_bytes_limit=-1)
                await asyncio.wait_for(done, 120)
                raw.figures["ordered consumer replay"] = (replay_n / (time.perf_counter() - started), "msg/s")
                await ordered.unsubscribe()

                await sub.jetstream().add_consumer("RAW", ConsumerConfig(durable_name="raw-pull", ack_policy=AckPolicy.EXPLICIT,
                                                                         filter_subject="raw.log"))
                psub = await sub.jetstream().pull_subscribe_bind(durable="raw-pull", stream="RAW")
                got = 0
                pull_n = replay_n // 5
                started = time.perf_counter()
                while got < pull_n:  # a bounded read of a known number of messages, not a wait
                    for msg in await psub.fetch(batch=256, timeout=10):
                        await msg.ack()
                        got += 1
                raw.figures["durable pull fetch + ack"] = (got / (time.perf_counter() - started), "msg/s")
            finally:
                await pub.close()
                await sub.close()

    async def hello(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/", hello)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
            lat = []
            for _ in range(n):
                t = time.perf_counter()
                async with http.get("/") as resp:
                    await resp.read()
                lat.append(time.perf_counter() - t)
            raw.figures["aiohttp GET p50"] = (_p50_us(lat), "µs")

            total = n * 2
            sem = asyncio.Semaphore(32)

            async def one() -> None:
                async with sem, http.get("/") as resp:
                    await resp.read()

            started = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(total)))
            raw.figures["aiohttp GET, 32 at once"] = (total / (time.perf_counter() - started), "req/s")
    finally:
        await runner.cleanup()
    return raw


# -- running the scripts ----------------------------------------------------------------------------


@dataclass
class Run:
    script: str
    args: list[str]
    code: int
    seconds: float
    stdout: str
    stderr: str
    writes_docs: bool
    peak_rss_mib: float = 0.0
    """The script's peak resident size (the largest of it and the processes it started and waited for)."""


def scripts(only: list[str]) -> list[Path]:
    found = sorted((ROOT / "bench").glob("*_bench.py"))  # not this runner, not helpers (goals.py)
    if only:
        found = [p for p in found if p.stem in only or p.name in only]
    return found


def options_of(script: Path) -> str:
    return subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, cwd=ROOT, timeout=60).stdout


def plan_args(script: Path, quick: bool, write_docs: bool, full: bool = False) -> tuple[list[str], bool]:
    help_text = options_of(script)
    args: list[str] = ["--full"] if full and "--full" in help_text else []
    if quick:
        given = QUICK.get(script.name, [])
        for i in range(0, len(given), 2):
            if given[i] in help_text:
                args += given[i:i + 2]
        if "--quick" in help_text:
            args.append("--quick")
    writes = "--write-docs" in help_text
    if writes and write_docs and not quick:  # quick figures never replace a script's own section
        args.append("--write-docs")
    return args, writes and write_docs and not quick


def run_script(script: Path, args: list[str], writes_docs: bool, timeout_s: float = SCRIPT_TIMEOUT_S) -> Run:
    print(f"== {script.name} {' '.join(args)}", flush=True)
    started = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, str(script), *args], stdout=out, stderr=err, text=True, cwd=ROOT, env=env)
        killer = threading.Timer(timeout_s, proc.kill)
        killer.start()
        try:
            # wait4, not wait: it also gives the child's peak resident size.
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    code = proc.returncode
    if code < 0 and time.perf_counter() - started >= timeout_s:
        stderr += f"\ntimed out after {timeout_s:.0f} s"
    seconds = time.perf_counter() - started
    print(stdout, end="" if stdout.endswith("\n") else "\n")
    if code:
        print(f"!! {script.name} exited {code}: {stderr.strip()[-2000:]}", flush=True)
    peak = usage.ru_maxrss / 1024
    print(f"   ({seconds:.0f} s, peak RSS {peak:,.0f} MiB)", flush=True)
    return Run(script.name, args, code, seconds, stdout, stderr, writes_docs, peak)


# -- the document -----------------------------------------------------------------------------------


def goals_section(runs: list[Run]) -> list[str]:
    """Every goal the scripts stated, misses first: a reader sees at once what fell short."""
    stated = [(run.script, g) for run in runs for g in goals.parse(run.stdout)]
    if not stated:
        return []
    missed = [(s, g) for s, g in stated if not g.met]
    head = (f"**{len(missed)} of {len(stated)} goals missed** in this run: "
            + "; ".join(f"`{s}` {g.figure} ({g.value:g}{g.unit})" for s, g in missed) + "."
            if missed else f"All {len(stated)} goals met in this run.")
    lines = ["### Goals", "", head, "", "| script | figure | value | goal |", "|---|---|---|---|"]
    for script, g in sorted(stated, key=lambda sg: sg[1].met):
        lines.append(f"| `{script}` | {_md(g.figure)} | {g.value:g}{_md(g.unit)} | {_md(g.verdict())} |")
    return lines + [""]


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def summary(m: dict[str, str], raw: Raw, runs: list[Run], quick: bool, total_s: float, full: bool = False) -> str:
    flag = " --quick" if quick else " --full" if full else ""
    lines = [
        BEGIN,
        "",
        f"Last run: `bench/run_all.py{flag}` (`make bench` runs it at the default sizes, `make bench-full` with "
        f"--full), {m['date']}, on "
        f"**{m['cores']} cores**, **{m['memory']} memory** ({m['cpu']}; {m['os']}; Python {m['python']}; load average "
        f"at the start {m['load']}). The scripts ran one after another, {total_s / 60:.1f} minutes in all"
        f"{'; with --quick sizes' if quick else ''}. Every client and server shared the same cores, so read the "
        "figures as sizes, not capacity.",
        "",
        *goals_section(runs),
        "### Raw limits, measured in the same run",
        "",
        "nats-server from the wheel (`sync_interval: always`, file storage, 200 B messages) and aiohttp, on loopback:",
        "",
        "| raw figure | value |",
        "|---|---|",
        *[f"| {name} | {raw.text(name)} |" for name in raw.figures],
        "",
        "### The scripts",
        "",
        "Each figure is in one place, next to the raw figure of its run: the script's own section below, or its output here.",
        "",
        "| script | options | seconds | peak RSS | its figures |",
        "|---|---|---|---|---|",
    ]
    for run in runs:
        where = (f"**failed** (exit {run.code}), its output below" if run.code
                 else "its own section" if run.writes_docs else "its output below")
        lines.append(f"| `{run.script}` | `{' '.join(run.args) or '(defaults)'}` | {run.seconds:.0f} | "
                     f"{run.peak_rss_mib:,.0f} MiB | {where} |")
    for run in runs:
        if (run.code or not run.writes_docs) and run.stdout.strip():
            # Indented, not fenced: a script's own "## Section" line must not start a line here,
            # or that script's --write-docs would find it.
            body = [f"    {line}" for line in run.stdout.rstrip().splitlines() if not LOG_LINE.match(line)]
            lines += ["", f"<details><summary>output of <code>{run.script}</code></summary>", "", *body, "", "</details>"]
    lines += ["", END]
    return "\n".join(lines) + "\n"


def write_summary(text: str, path: Path = DOCS) -> None:
    doc = path.read_text() if path.exists() else "# Benchmarks\n"
    if BEGIN in doc and END in doc:
        head, rest = doc.split(BEGIN, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        doc = head + text + "\n" + tail
    else:
        title, _, body = doc.partition("\n")
        doc = f"{title}\n\n{text}\n{body.lstrip(chr(10))}"
    path.write_text(doc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="smaller sizes (a few minutes in all)")
    mode.add_argument("--full", action="store_true", help="the issues' sizes (--full to each script that has it; hours)")
    parser.add_argument("--only", nargs="*", default=[], help="only these scripts (names, with or without .py)")
    parser.add_argument("--no-docs", action="store_true", help="print only; leave docs/benchmarks.md alone")
    parser.add_argument("--strict", action="store_true", help="exit 3 when a figure misses its goal")
    args = parser.parse_args()
    started = time.perf_counter()
    m = machine()
    print(f"machine: {m}", flush=True)
    raw = asyncio.run(measure_raw(args.quick))
    for name in raw.figures:
        print(f"raw {name}: {raw.text(name)}", flush=True)
    runs = []
    for script in scripts(args.only):
        script_args, writes = plan_args(script, args.quick, not args.no_docs, args.full)
        runs.append(run_script(script, script_args, writes, FULL_TIMEOUT_S if args.full else SCRIPT_TIMEOUT_S))
    text = summary(m, raw, runs, args.quick, time.perf_counter() - started, args.full)
    if not args.no_docs:
        write_summary(text)
        print(f"wrote the summary of {DOCS.relative_to(ROOT)}")
    failed = [r.script for r in runs if r.code]
    if failed:
        print(f"failed: {', '.join(failed)}")
    missed = [(r.script, g) for r in runs for g in goals.parse(r.stdout) if not g.met]
    for name, g in missed:
        print(f"GOAL MISSED: {name}: {g.figure} = {g.value:g}{g.unit}, goal {g.op} {g.target:g}{g.unit}")
    if failed:
        return 1
    return 3 if missed and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
