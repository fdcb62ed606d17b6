"""The notifier's reads per job end, unscoped (`EventStore`: batch direct gets) and scoped
(`ScopedEventStore` as services/notifier/entrypoint.py makes it: decision 0057), alternated in
one run on one nats-server so that both meet the same machine.

Per sample: `Notifier._job_facts` of a job's end (the job read up to its end, its cluster of
`--cluster-events` events read whole), and the tenant's catalog read up to that end (what a
check that finds drift a repair would fix reads besides). p50 and p90 of each, in µs, and of a
raw `js.publish` round trip for scale. Not a goal of bench/goals.py: a measurement for 0057.

    .venv/bin/python bench/notifier_reads_bench.py --samples 200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contracts import subjects
from contracts.events import ClusterLeaseChanged, ClusterRequested, JobRequested, JobSucceeded
from contracts.records import Append

TENANT = "acme"


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _setup(store: Any, cluster_events: int) -> tuple[Any, int]:
    from muster.catalog.files import load_catalog
    from muster.catalog.store import apply_catalog

    await apply_catalog(store, TENANT, load_catalog(Path(__file__).resolve().parents[1] / "muster" / "demo" / "catalog"))
    cluster = subjects.cluster_events(TENANT, "c1")
    items = [Append(ClusterRequested(tenant=TENANT, cluster_id="c1", name="c1", template="t", provider="p", job_id="j0"),
                    msg_id="c1-requested")]
    items += [Append(ClusterLeaseChanged(cluster_id="c1", expires_at=datetime.now(UTC)), msg_id=f"c1-{i}") for i in range(cluster_events - 1)]
    await store.append(cluster, items)
    job = subjects.job_events(TENANT, "j1")
    seqs = await store.append(job, [Append(JobRequested(tenant=TENANT, job_id="j1", cluster_id="c1", operation="delete",
                                                        request={}, requested_by="uma"), msg_id="j1-r"),
                                    Append(JobSucceeded(job_id="j1"), msg_id="j1-end")])
    [end] = [r for r in await store.read(job) if r.seq == seqs[-1]]
    return end, seqs[-1]


async def run(samples: int, cluster_events: int) -> dict[str, Any]:
    from muster.bus.connect import connect
    from muster.bus.eventstore import EventStore
    from muster.bus.scopedlog import ScopedEventStore
    from muster.bus.server import NatsServer
    from muster.bus.streams import ensure_streams
    from muster.catalog.store import catalog_filter
    from muster.ports.clock import AsyncioClock
    from services.notifier.app import Notifier

    with tempfile.TemporaryDirectory() as tmp:
        async with NatsServer(Path(tmp) / "nats") as server:
            nc = await connect(server.url, name="bench")
            try:
                js = nc.jetstream()
                await ensure_streams(js)
                end, seq = await _setup(EventStore(nc), cluster_events)
                stores = {"unscoped": EventStore(nc),
                          "scoped": ScopedEventStore(nc, confirm=(subjects.ALL_NOTIFICATION_EVENTS,), deletes=False)}
                notifiers = {k: Notifier(s, None, AsyncioClock(), lambda t: []) for k, s in stores.items()}  # type: ignore[arg-type]
                facts: dict[str, list[float]] = {k: [] for k in stores}
                catalog: dict[str, list[float]] = {k: [] for k in stores}
                publish: list[float] = []
                for i in range(samples + 10):  # (the first 10 of each warm up)
                    for kind in (("unscoped", "scoped") if i % 2 == 0 else ("scoped", "unscoped")):
                        t0 = time.perf_counter()
                        found = await notifiers[kind]._job_facts(TENANT, end)
                        t1 = time.perf_counter()
                        await stores[kind].read(catalog_filter(TENANT), up_to_seq=seq)
                        t2 = time.perf_counter()
                        assert found is not None and found[0]["cluster"] == "c1"
                        if i >= 10:
                            facts[kind].append((t1 - t0) * 1e6)
                            catalog[kind].append((t2 - t1) * 1e6)
                    t0 = time.perf_counter()
                    await js.publish(f"{subjects.EVT}.bench.plan.raw", b"x")  # (a stored event: the round trip)
                    if i >= 10:
                        publish.append((time.perf_counter() - t0) * 1e6)
            finally:
                await nc.close()
    out: dict[str, Any] = {"samples": samples, "cluster_events": cluster_events}
    for kind in ("unscoped", "scoped"):
        out[kind] = {"job_facts_p50_us": round(statistics.median(facts[kind])), "job_facts_p90_us": round(_pct(facts[kind], 0.9)),
                     "catalog_p50_us": round(statistics.median(catalog[kind])), "catalog_p90_us": round(_pct(catalog[kind], 0.9))}
    out["raw_publish_p50_us"] = round(statistics.median(publish))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--cluster-events", type=int, default=20)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.samples, args.cluster_events)), indent=2))


if __name__ == "__main__":
    main()
