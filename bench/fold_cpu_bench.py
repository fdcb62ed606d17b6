"""Where a full fold's CPU goes, stage by stage, in this process alone (no server): the messages
of a planner log are framed as nats-server sends them to an ordered consumer (HMSG with a
`$JS.ACK` reply subject) and fed to nats-py's protocol parser of an unconnected client.

    python bench/fold_cpu_bench.py [--events 100000] [--callgrind]

Stages, each cumulative over the one before:
  nats-py:  a plain nats-py subscription with a callback that counts (the client side of the
            raw figure of planner_rebuild_bench.py, without the ordered consumer's own checks);
  wire:     muster's reader (`muster.bus.ordered` on `muster.bus.wire`): the raw frame to a callback, sequence checks;
  decode:   + headers and body decoded into a `Recorded` (`eventstore._from_wire`);
  fold:     + every Job and Cluster folded (`repository.fold`).
`--callgrind` runs each stage under valgrind at two sizes and reports instructions per message
(the difference, so start-up cancels out): reproducible where CPU time is not.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nats.aio.client import Client
from nats.aio.subscription import Subscription
from nats.protocol.parser import Parser

from bench.planner_rebuild_bench import log_jobs
from muster.bus import ordered, wire
from muster.bus.eventstore import _from_wire
from muster.bus.repository import fold
from services.planner.domain.cluster import Cluster
from services.planner.domain.job import Job

STAGES = ("nats-py", "wire", "decode", "fold")
CHUNK = 65536  # what nats-py reads from its socket at a time


def frames(events: int) -> tuple[list[bytes], int]:
    """The cluster events, then the job events (as the fold reads them), framed for sid 1 as
    one consumer's deliveries."""
    clusters: list[tuple[str, bytes, bytes]] = []
    jobs: list[tuple[str, bytes, bytes]] = []
    for batch in log_jobs(events):
        for subject, item in batch:
            block = ("NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in item.headers().items()) + "\r\n").encode()
            (clusters if ".cluster." in subject else jobs).append((subject, block, item.event.model_dump_json().encode()))
    out = []
    ordered = clusters + jobs
    for i, (subject, block, data) in enumerate(ordered):
        reply = b"$JS.ACK.EVENTS.c.1.%d.%d.1764000000000000000.%d" % (i + 1, i + 1, len(ordered) - i - 1)
        out.append(b"HMSG %s 1 %s %d %d\r\n%s%s\r\n" % (subject.encode(), reply, len(block), len(block) + len(data), block, data))
    blob = b"".join(out)
    return [blob[i:i + CHUNK] for i in range(0, len(blob), CHUNK)], len(out)


async def run(stage: str, chunks: list[bytes], n: int) -> tuple[int, float]:
    nc = Client()
    parser = Parser(nc)
    jobs: dict[str, Any] = {}
    clusters: dict[str, Any] = {}
    seen = 0
    done = asyncio.Event()
    if stage == "nats-py":
        async def count(msg: Any) -> None:
            nonlocal seen
            seen += 1
            if seen == n:
                done.set()

        async def error(err: Exception) -> None:
            raise err

        sub = Subscription(nc, 1, "x", cb=count, pending_msgs_limit=-1, pending_bytes_limit=-1)
        sub._start(error)
        nc._subs[1] = sub
    else:
        def on_message(subject: bytes, seq: int, data: bytes, block: bytes) -> None:
            if stage == "wire":
                return
            r = _from_wire(subject, seq, data, block)
            if stage == "fold":
                key = r.subject.rsplit(".", 1)[1]
                if ".job." in r.subject:
                    jobs[key] = fold(Job, jobs.get(key), r)
                else:
                    clusters[key] = fold(Cluster, clusters.get(key), r)

        reader = ordered.OrderedReader(nc, "EVENTS", [">"], on_message)
        wire._handlers(nc)[1] = reader._handler(asyncio.get_running_loop().create_future())
        done.set()
    cpu = time.process_time()
    for chunk in chunks:
        await parser.parse(chunk)
    await done.wait()
    return n, time.process_time() - cpu


def callgrind(stage: str, framed: Path) -> int:
    """Instructions of one run of `stage` on the frames in `framed`, under valgrind."""
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__, "--stage", stage,
         "--frames", str(framed)], capture_output=True, text=True, check=True,
    ).stderr
    found = re.search(r"Collected : (\d+)", out)
    if not found:
        raise RuntimeError(f"no instruction count from valgrind: {out[-500:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--callgrind", action="store_true", help="instructions per message under valgrind (slow)")
    parser.add_argument("--stage", choices=STAGES, help=argparse.SUPPRESS)
    parser.add_argument("--frames", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stage:  # one stage on frames made beforehand (not counted), for --callgrind
        chunks, n = pickle.loads(args.frames.read_bytes())
        asyncio.run(run(args.stage, chunks, n))
        return
    chunks, n = frames(args.events)
    framed: dict[int, tuple[Path, int]] = {}
    if args.callgrind:
        tmp = Path(tempfile.mkdtemp(prefix="fold-cpu-"))
        for size in (args.events // 10, args.events // 10 * 3):
            made = frames(size)
            framed[size] = (tmp / f"{size}.pickle", made[1])
            framed[size][0].write_bytes(pickle.dumps(made))
    print(f"{args.events:,} events of a planner log, framed as an ordered consumer receives them; "
          f"CPython {sys.version.split()[0]}, {os.cpu_count()} CPUs, CPU time of this process only")
    print()
    print("| stage | CPU µs per message | of which this stage |" + (" instructions per message | of which this stage |" if args.callgrind else ""))
    print("|---|---|---|" + ("---|---|" if args.callgrind else ""))
    before = {"cpu": 0.0, "ins": 0.0}
    for stage in STAGES:
        _, cpu = min((asyncio.run(run(stage, chunks, n)) for _ in range(3)), key=lambda r: r[1])
        us = cpu / n * 1e6
        row = f"| {stage} | {us:.2f} | {us - before['cpu'] if stage != 'wire' else us:+.2f} |"
        if args.callgrind:
            (small, n_small), (large, n_large) = framed.values()
            ins = (callgrind(stage, large) - callgrind(stage, small)) / (n_large - n_small)
            row += f" {ins:,.0f} | {ins - before['ins'] if stage != 'wire' else ins:+,.0f} |"
            before["ins"] = ins
        before["cpu"] = us
        print(row)
    if framed:
        shutil.rmtree(next(iter(framed.values()))[0].parent, ignore_errors=True)
    print()
    print("(wire replaces nats-py's path, so its own figure is shown; each later stage adds to the one before)")


if __name__ == "__main__":
    main()
