"""Idle cost: the CPU each process of a `muster up` deployment spends with nothing to do, next to
a bare nats-server (JetStream on, nothing connected) measured in the same run. Not a test: run
it, read the table (docs/benchmarks.md, "Idle").

    .venv/bin/python bench/idle_bench.py [--seconds 30] [--settle 10]

CPU is each process's time on a CPU over the window, summed over its threads (the scheduler's
own count, /proc/<pid>/task/*/schedstat, in ns: /proc/<pid>/stat's clock ticks charge a whole
10 ms tick to whatever runs when it falls, which overstated a process waking a few times a
second several times over); context switches (voluntary + not, all threads) count wake-ups.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from muster.bus.server import NatsServer  # noqa: E402

MUSTER = Path(sys.executable).parent / "muster"


def sample(pid: int) -> tuple[float, int]:
    """(CPU seconds, context switches) of one process so far, summed over its threads."""
    cpu, switches = 0.0, 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            cpu += int((task / "schedstat").read_text().split()[0]) / 1e9
            switches += sum(int(line.split()[1]) for line in (task / "status").read_text().splitlines()
                            if "ctxt_switches" in line)
        except OSError:
            continue  # a thread that just ended
    return cpu, switches


def children(parent: int) -> dict[int, str]:
    """The processes `muster up` started, by the service each runs."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            argv = (entry / "cmdline").read_text().split("\0")
        except OSError:
            continue
        if ppid == parent:
            found[int(entry.name)] = argv[argv.index("-m") + 2] if "-m" in argv else Path(argv[0]).name
    return found


def wait_up(proc: subprocess.Popen[str], timeout: float = 120.0) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    for line in proc.stdout:  # its own output, line by line, until it says it is up
        if "muster is up" in line:
            return
        if time.monotonic() > deadline:
            break
    raise SystemExit("muster up did not come up")


async def measure(seconds: float, settle: float) -> list[tuple[str, float, float]]:
    with tempfile.TemporaryDirectory() as work:
        bare = await NatsServer(Path(work) / "bare").start()
        up = subprocess.Popen([str(MUSTER), "up", "--catalog", str(ROOT / "muster/demo/catalog"), "--tracker-port", "0"],
                              cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            wait_up(up)
            await asyncio.sleep(settle)  # the catalog's apply and the first lease renewals over
            assert bare.process is not None
            procs = {**children(up.pid), bare.process.pid: "bare nats-server"}
            before = {pid: sample(pid) for pid in procs}
            await asyncio.sleep(seconds)
            after = {pid: sample(pid) for pid in procs}
        finally:
            env = {**os.environ, "MUSTER_DATA_DIR": str(Path(work) / ".muster")}
            subprocess.run([str(MUSTER), "down"], cwd=work, env=env, check=False, capture_output=True)
            up.wait(60)
            await bare.stop()
    return [(name, 1000 * (after[p][0] - before[p][0]) / seconds, (after[p][1] - before[p][1]) / seconds)
            for p, name in procs.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--settle", type=float, default=10.0)
    args = parser.parse_args()
    rows = asyncio.run(measure(args.seconds, args.settle))
    print(f"idle {args.seconds:g} s after `muster up` (+{args.settle:g} s to settle)")
    print(f"{'process':<18} {'CPU ms/s':>9} {'wakes/s':>8}")
    for name, cpu, wakes in sorted(rows, key=lambda r: -r[1]):
        print(f"{name:<18} {cpu:>9.2f} {wakes:>8.1f}")
    services = [r for r in rows if r[0] not in ("nats-server", "bare nats-server")]
    print(f"{'services, total':<18} {sum(r[1] for r in services):>9.2f} {sum(r[2] for r in services):>8.1f}")


if __name__ == "__main__":
    main()
