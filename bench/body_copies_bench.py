"""How often a create stores the same body twice: decision 57 keeps a body under each event
subject that references it (a service's rights name the subjects whose bodies it may read), so a
body identical under two subjects is two copies in `BODIES`. Not a test: run it, read the line.

    .venv/bin/python bench/body_copies_bench.py [--nodes 1000]

One create of `--nodes` nodes through the real services (bench/scale_bench.py's deployment: a
nats-server of its own, authorization on, the simulated cloud), after a warm-up create of 5; then
`BODIES` read whole with the system token: how many bodies (an event subject and a digest), how
many distinct digests, and how many digests and bytes are stored under more than one subject.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.scale_bench import WARM_UP_NODES, Run, T, catalog, caught_up, create_and_wait  # noqa: E402
from muster.bus.bodies import BODIES_STREAM  # noqa: E402
from muster.bus.eventstore import EventStore  # noqa: E402
from muster.bus.ordered import OrderedReader  # noqa: E402
from muster.catalog.store import apply_catalog  # noqa: E402


async def copies(run: Run) -> dict[str, object]:
    """Every part in `BODIES`, grouped: digest -> {event subject: bytes}."""
    stored: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))

    def on_message(subject: bytes, seq: int, data: bytes, header_block: bytes) -> None:
        tokens = subject.decode().split(".")
        if len(tokens) >= 5 and tokens[2] != "_moved":  # muster.body.<event subject's rest>.<hex>.<i>
            stored[tokens[-2]][".".join(tokens[2:-2])] += len(data)

    await OrderedReader(run.nc, BODIES_STREAM, [">"], on_message).run()
    twice = {d: s for d, s in stored.items() if len(s) > 1}
    return {"bodies": sum(len(s) for s in stored.values()), "digests": len(stored),
            "stored_bytes": sum(sum(s.values()) for s in stored.values()),
            "digests_under_several_subjects": len(twice),
            "extra_copies": sum(len(s) - 1 for s in twice.values()),
            "extra_bytes": sum(sum(sorted(s.values())[1:]) for s in twice.values()),
            "kinds": dict(Counter(".".join(x.split(".")[1:2]) for s in stored.values() for x in s)),
            "twice_under": sorted({" + ".join(sorted(".".join(x.split(".")[1:2]) for x in s)) for s in twice.values()})}


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="body-copies-") as tmp:
        async with Run(Path(tmp) / "run", planners=1, provisioners=2, capacity=64, lease_ttl=10) as run:
            await apply_catalog(EventStore(run.nc), T, catalog(args.nodes))
            await create_and_wait(run, WARM_UP_NODES, args.timeout, name="warm-up")
            before = await copies(run)
            final, _, _ = await create_and_wait(run, args.nodes, args.timeout)
            await caught_up(run, args.timeout)
            after = await copies(run)
            print(json.dumps({"nodes": args.nodes, "final": final, "after_warm_up": before, "after_create": after}, indent=1))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000, help="nodes of the create")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds the create may take")
    asyncio.run(main(parser.parse_args()))
