"""What a collector that is not there costs: two `muster up` deployments side by side, one
without tracing, one with `OTEL_EXPORTER_OTLP_ENDPOINT` naming a closed port (an operator who set
the variable and has no collector running), each asked in turn for a create of the demo catalog.
Not a test: run it, read the table (docs/benchmarks.md, "Tracing: no collector").

    .venv/bin/python bench/dead_collector_bench.py [--creates 6]

Per create: the `muster cluster create` command's wall time (its answer, then its exit, which
with tracing on waits for its own spans: at most `OTEL_BSP_EXPORT_TIMEOUT`, 2 s), and the job's
time from its first event to its last in the log (the services' side, which spans must not slow).
The command runs with the same environment as its deployment, as an operator's shell would.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

MUSTER = Path(sys.executable).parent / "muster"
CATALOG = Path(__file__).resolve().parent.parent / "muster" / "demo" / "catalog"


def closed_port() -> int:
    """A port nothing listens on (bound then released: connections to it are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def up(data_dir: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen([str(MUSTER), "up", "--data-dir", str(data_dir), "--tracker-port", "0", "--catalog", str(CATALOG)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if "muster is up" in line:
            return proc
        print(f"  [{data_dir.name}] {line.rstrip()}", file=sys.stderr)
    raise SystemExit(f"muster up in {data_dir} ended before it was up")


def create(name: str, data_dir: Path, env: dict[str, str]) -> tuple[float, float]:
    """(the command's wall time, the job's time in the log), in seconds."""
    started = time.perf_counter()
    out = subprocess.run([str(MUSTER), "cluster", "create", name, "-t", "hadoop-small", "-n", "2", "--wait", "--json",
                          "--data-dir", str(data_dir)], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if out.returncode:
        raise SystemExit(f"create {name} in {data_dir}: exit {out.returncode}: {out.stderr.strip()}")
    history = subprocess.run([str(MUSTER), "events", "--cluster", name, "--data-dir", str(data_dir)], env=env,
                             capture_output=True, text=True, check=True).stdout.splitlines()
    times = [datetime.fromisoformat(json.loads(line)["time"]) for line in history if line.strip()]
    return wall, (max(times) - min(times)).total_seconds()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--creates", type=int, default=6)
    args = parser.parse_args()
    plain = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    dead = {**plain, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{closed_port()}"}
    with tempfile.TemporaryDirectory(prefix="muster-dead-collector-") as tmp:
        runs = {"off": (Path(tmp) / "off", plain), "dead collector": (Path(tmp) / "dead", dead)}
        procs = [up(d, env) for d, env in runs.values()]
        try:
            figures: dict[str, list[tuple[float, float]]] = {k: [] for k in runs}
            for i in range(args.creates):
                for label, (data_dir, env) in runs.items():
                    figures[label].append(create(f"c{i}", data_dir, env))
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(60)
    print(f"{args.creates} creates (2 nodes, demo catalog) each, alternating; seconds")
    print("| deployment | command p50 | command max | job p50 | job max | raw commands | raw jobs |")
    print("|---|---|---|---|---|---|---|")
    for label, rows in figures.items():
        walls, jobs = [w for w, _ in rows], [j for _, j in rows]
        print(f"| {label} | {statistics.median(walls):.2f} | {max(walls):.2f} | {statistics.median(jobs):.2f} | "
              f"{max(jobs):.2f} | {' '.join(f'{w:.2f}' for w in walls)} | {' '.join(f'{j:.2f}' for j in jobs)} |")


if __name__ == "__main__":
    main()
