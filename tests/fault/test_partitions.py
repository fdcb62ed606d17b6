"""Scenario 9: partitions, not only crashes (docs/faults.md). Every nats-server and service runs
in a network namespace of its own (`netstack.NetStack`); the nemesis cuts links with nftables.

- In the default run: a planner is isolated mid-job (nothing in or out). Its leases lapse, the
  other planner adopts its jobs and finishes them; after the heal, the log shows that the cut-off
  planner wrote nothing for those jobs once they were adopted (`fencing.py`), and every
  invariant holds.
- Long (`make test-long`): see test_partitions_long.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from contracts import subjects
from contracts.commands import Accepted, CreateCluster
from contracts.events import JobSucceeded
from muster.bus.eventstore import EventStore

from .fencing import writers
from .harness import demo_catalog, fault_options
from .netns import available
from .netstack import NetStack

pytestmark = [pytest.mark.fault, pytest.mark.timeout(240),
              pytest.mark.skipif(available() is not None, reason=f"partitions need network namespaces: {available()}")]
T = "default"
TTL = 3.0


def planner_options(base: Path, planners: int = 2, provisioners: int = 2) -> dict[str, list[str]]:
    options = fault_options(base, provisioners)
    for i in range(1, planners + 1):
        options[f"planner-{i}"] = ["--instance", f"planner-{i}"]
    return options


async def answers(fs: NetStack, planner: str, deadline: float = 60.0) -> None:
    """Until `planner` answers on its own connection (the metrics every planner answers). TCP
    keeps order, so by then whatever it had sent before the heal has reached the server. A
    request made before its connection came back is lost: it is asked again, each try bounded."""
    inbox = fs.conn.new_inbox()
    heard: asyncio.Queue[str] = asyncio.Queue()

    async def on_answer(msg: object) -> None:
        heard.put_nowait(json.loads(msg.data).get("planner", ""))  # type: ignore[attr-defined]

    sub = await fs.conn.subscribe(inbox, cb=on_answer)
    try:
        async with asyncio.timeout(deadline):
            while True:
                await fs.conn.publish(subjects.PLANNER_METRICS, b"{}", reply=inbox)
                try:
                    async with asyncio.timeout(2.0):
                        while await heard.get() != planner:
                            pass
                    return
                except TimeoutError:
                    continue
    finally:
        await sub.unsubscribe()


async def test_an_isolated_planner_is_fenced(tmp_path: Path) -> None:
    replicas = {"planner": 2, "provisioner": 2}
    async with await NetStack.start(tmp_path, replicas=replicas, extra_args=planner_options(tmp_path), nats_nodes=1) as fs:
        await fs.load_catalog(T, demo_catalog(latency_ms="200-500"))
        replies = []
        for i in range(4):
            reply = await fs.client.request(CreateCluster(name=f"p{i}", template="hadoop-small", nodes=3), tenant=T)
            assert isinstance(reply, Accepted), reply
            replies.append(reply)
        store = EventStore(fs.conn)
        owners = {r.job_id: (await store.read(subjects.job_events(T, r.job_id)))[0].event.planner for r in replies}
        victim = max(sorted(set(owners.values())), key=list(owners.values()).count)
        theirs = [r.job_id for r in replies if owners[r.job_id] == victim]
        other = "planner-2" if victim == "planner-1" else "planner-1"
        await fs.when(subjects.job_tasks(T, theirs[0]), lambda r: r.type == "TaskCompleted", _noop, timeout=60)

        isolated_at = time.time()
        await fs.nemesis.isolate(victim)
        finals = [await fs.wait_final(r.job_id, timeout=120) for r in replies]
        healed_at = time.time()
        await fs.nemesis.heal()
        await answers(fs, victim)  # what it buffered while cut off has landed (or been refused) by now

        assert all(isinstance(f, JobSucceeded) for f in finals), finals
        log = await store.read(subjects.ALL_EVENTS)
        written = await writers(fs.conn)
        adopted = {r.event.job_id: r for r in log if r.type == "JobAdopted" and r.event.previous == victim}
        ended = {r.event.job_id: r.time.timestamp() for r in log if r.type == "JobSucceeded"}
        open_then = [j for j in theirs if ended[j] > isolated_at]
        assert open_then and set(open_then) <= set(adopted), (open_then, sorted(adopted))
        for job_id, adoption in adopted.items():
            assert adoption.event.planner == other and written.get(adoption.seq) == other
            after = [r for r in log if subjects.fence_subject(r.subject) == subjects.job_events(T, job_id) and r.seq > adoption.seq]
            assert after and all(written.get(r.seq) == other for r in after), [(r.seq, r.type, written.get(r.seq)) for r in after]
        cut_off = sorted(r.seq for r in log if written.get(r.seq) == victim and isolated_at + TTL < r.time.timestamp() < healed_at)
        print(f"\n[scenario 9] isolated {victim} ({len(theirs)} of 4 jobs); {other} adopted {len(adopted)} after "
              f"{min(a.time.timestamp() for a in adopted.values()) - isolated_at:.1f}s; events the cut-off planner "
              f"decided after its lease lapsed and before the heal: {len(cut_off)}")
        assert not cut_off, cut_off
        report = await fs.check()
        report.assert_ok()
        assert report.fencing.adoptions >= len(adopted)


async def _noop() -> None:
    return None
