"""The nemesis soak (issue #18.10; `make soak`, docs/faults.md): a fixed number of operations
across four tenants, spread over a fixed time, while a nemesis kills -9 and restarts random
processes; then every job must be final and the whole-log invariants must hold.

    async with await FaultStack.cluster(...) as fs:        # a 3-node NATS cluster and the services
        result = await Soak(fs, SoakConfig(seconds=600, operations=300)).run()

- **Workload.** Actors (two per tenant) each drive one cluster through its life: create, then
  expand, shrink, restart services, job control (pause + resume, or cancel) on an expand, retry
  of a job that rolled back, and delete; then a new cluster. Operation k may not start before
  `start + k * seconds / operations` (a timer), so the run lasts at least `seconds`. Requests go
  through `MusterClient.request` (the same idempotency key on every try), so one that meets a dead
  planner or NATS node is sent again and maps to the same job.
- **Nemesis.** At random moments (exponential gaps, mean `fault_every_s`) it kills -9 one of:
  the planner, a solver, a provisioner, the tracker, or one node of the NATS cluster, and starts
  it again after a random pause (same arguments; a node on the same port and store). One fault
  at a time, so the cluster always keeps a majority.
- **The end.** The nemesis stops with everything running, the actors wait for their jobs, then
  `invariants.check` replays the whole log. `SoakResult` has the figures docs/faults.md reports.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from contracts import subjects
from contracts.commands import (
    Accepted,
    CancelJob,
    CreateCluster,
    DeleteCluster,
    ExpandCluster,
    PauseJob,
    Rejected,
    RestartServices,
    ResumeJob,
    RetryJob,
    ShrinkCluster,
)
from contracts.events import FINAL_JOB_EVENTS
from muster.bus.eventstore import EventStore
from muster.client import NoAnswer

from .harness import FaultStack
from .invariants import Report

TENANTS = ("acme", "globex", "initech", "umbrella")


@dataclass(frozen=True)
class SoakConfig:
    seconds: float = 600.0
    operations: int = 300
    tenants: tuple[str, ...] = TENANTS
    actors_per_tenant: int = 2
    failure_rate: str = "0.05"
    fault_every_s: float = 20.0
    """Mean gap between two faults."""
    down_s: tuple[float, float] = (1.0, 8.0)
    """How long a killed process stays down."""
    job_deadline_s: float = 600.0
    seed: int = 18


@dataclass
class SoakResult:
    seconds: float = 0.0
    operations: Counter[str] = field(default_factory=Counter)
    """Operation -> how many were carried out (each is one request, or two for job control)."""
    requests: int = 0
    accepted: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    """Reason (its first words) -> count: expected ones (a job ended before its pause)."""
    unanswered: int = 0
    unanswered_requests: list[str] = field(default_factory=list)
    """Which (seconds into the run, tenant, what, the client's words): a lead for the next run."""
    jobs: Counter[str] = field(default_factory=Counter)
    """Final state seen by the actors -> jobs."""
    faults: Counter[str] = field(default_factory=Counter)
    fault_log: list[str] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)

    def figures(self) -> dict[str, Any]:
        r = self.report
        return {
            "seconds": round(self.seconds, 1), "operations": sum(self.operations.values()), "requests": self.requests,
            "faults injected": sum(self.faults.values()), "tasks lost": r.get("lost", -1),
            "duplicate attempts": r.get("duplicates", -1), "jobs not final": r.get("not_final", -1),
            "invariant problems": len(r.get("problems", [])),
        }

    def to_json(self) -> str:
        # Not dataclasses.asdict: it rebuilds a Counter from (key, value) pairs, counting the pairs.
        body = {k: dict(v) if isinstance(v, Counter) else v for k, v in vars(self).items()}
        return json.dumps({"figures": self.figures(), **body}, indent=1, default=str)


class Soak:
    def __init__(self, fs: FaultStack, config: SoakConfig) -> None:
        self.fs, self.cfg = fs, config
        self.rng = random.Random(config.seed)
        self.result = SoakResult()
        self._next = 0
        self._start = 0.0
        self._quiet = asyncio.Event()
        """Set when the nemesis must stop."""

    # -- running -------------------------------------------------------------------------------

    async def run(self) -> SoakResult:
        self._start = time.monotonic()
        nemesis = asyncio.create_task(self._nemesis(), name="nemesis")
        actors = [self._actor(tenant, f"{tenant}-{i}", random.Random(self.rng.random()))
                  for tenant in self.cfg.tenants for i in range(self.cfg.actors_per_tenant)]
        try:
            await asyncio.gather(*actors)
        finally:
            self._quiet.set()
            await nemesis  # it restarts whatever it had killed before it returns
        self.result.seconds = time.monotonic() - self._start
        report = await self.fs.check()
        self.result.report = _report_dict(report)
        return self.result

    def _take(self) -> int | None:
        if self._next >= self.cfg.operations:
            return None
        self._next += 1
        return self._next - 1

    async def _not_before(self, k: int) -> None:
        """A timer: operation k starts no earlier than its slot."""
        delay = self._start + k * self.cfg.seconds / self.cfg.operations - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

    # -- the workload ----------------------------------------------------------------------------

    async def _actor(self, tenant: str, name: str, rng: random.Random) -> None:
        cluster: str | None = None
        nodes = 0
        last_final: Any = None
        last_job: str | None = None
        while (k := self._take()) is not None:
            await self._not_before(k)
            if cluster is None:
                nodes = rng.randint(2, 4)
                reply, final = await self._job(tenant, "create", CreateCluster(name=f"{name}-{k}", template="hadoop-small", nodes=nodes))
                if isinstance(reply, Accepted):
                    if _succeeded(final):
                        cluster, last_job, last_final = reply.cluster_id, reply.job_id, final
                    else:  # rolled back: clear away whatever is left of it
                        await self._delete(tenant, reply.cluster_id)
                continue
            if last_final is not None and type(last_final).__name__ in ("JobRolledBack", "JobFailed") and rng.random() < 0.5:
                assert last_job is not None
                # The retried job ends again: wait for a final event after the one it had.
                ended = await self._ended_seq(tenant, last_job)
                _, last_final = await self._job(tenant, "retry", RetryJob(job_id=last_job), since_seq=ended)
                continue
            pick = rng.random()
            if pick < 0.25:
                target = nodes + rng.randint(1, 2)
                reply, last_final = await self._job(tenant, "expand", ExpandCluster(cluster_id=cluster, nodes=target))
                nodes = target if _succeeded(last_final) else nodes
            elif pick < 0.40 and nodes > 2:
                target = nodes - 1
                reply, last_final = await self._job(tenant, "shrink", ShrinkCluster(cluster_id=cluster, nodes=target))
                nodes = target if _succeeded(last_final) else nodes
            elif pick < 0.55:
                reply, last_final = await self._job(tenant, "restart", RestartServices(cluster_id=cluster))
            elif pick < 0.70:
                reply, last_final = await self._controlled(tenant, "pause+resume", cluster, nodes + 1, rng)
                nodes = nodes + 1 if _succeeded(last_final) else nodes
            elif pick < 0.85:
                reply, last_final = await self._controlled(tenant, "cancel", cluster, nodes + 1, rng)
                nodes = nodes + 1 if _succeeded(last_final) else nodes
            else:
                await self._delete(tenant, cluster)
                cluster, last_final = None, None
                continue
            if isinstance(reply, Accepted):
                last_job = reply.job_id

    async def _delete(self, tenant: str, cluster: str) -> bool:
        reply, final = await self._job(tenant, "delete", DeleteCluster(cluster_id=cluster))
        return isinstance(reply, Accepted) and _succeeded(final)

    async def _controlled(self, tenant: str, what: str, cluster: str, nodes: int, rng: random.Random) -> tuple[Any, Any]:
        """An expand, and job control on it while it runs."""
        reply = await self._send(tenant, what, ExpandCluster(cluster_id=cluster, nodes=nodes))
        if not isinstance(reply, Accepted):
            return reply, None
        await asyncio.sleep(rng.uniform(0.0, 1.5))  # some of its tasks under way
        if what == "cancel":
            await self._send(tenant, None, CancelJob(job_id=reply.job_id))
        else:
            await self._send(tenant, None, PauseJob(job_id=reply.job_id))
            await asyncio.sleep(rng.uniform(0.5, 2.0))
            await self._send(tenant, None, ResumeJob(job_id=reply.job_id))
        return reply, await self._final(tenant, reply.job_id)

    async def _job(self, tenant: str, what: str, command: Any, since_seq: int = 0) -> tuple[Any, Any]:
        reply = await self._send(tenant, what, command)
        if not isinstance(reply, Accepted):
            return reply, None
        return reply, await self._final(tenant, reply.job_id, since_seq)

    async def _send(self, tenant: str, what: str | None, command: Any) -> Any:
        if what is not None:
            self.result.operations[what] += 1
        self.result.requests += 1
        try:
            reply = await self.fs.client.request(command, tenant=tenant, timeout=10.0, attempts=12)
        except NoAnswer as err:
            self.result.unanswered += 1
            self.result.unanswered_requests.append(f"{time.monotonic() - self._start:.1f}s {tenant} {what}: {err}")
            print(f"[soak] unanswered: {self.result.unanswered_requests[-1]}")
            return None
        if isinstance(reply, Rejected) and reply.retry:  # "send again" on every try: no planner acted for it
            self.result.unanswered += 1
            self.result.unanswered_requests.append(f"{time.monotonic() - self._start:.1f}s {tenant} {what}: {reply.reason}")
            print(f"[soak] unanswered: {self.result.unanswered_requests[-1]}")
            return None
        if isinstance(reply, Rejected):
            self.result.rejected[" ".join(reply.reason.split()[:6])] += 1
        elif isinstance(reply, Accepted):
            self.result.accepted += 1
        return reply

    async def _ended_seq(self, tenant: str, job_id: str) -> int:
        """The sequence of the job's last final event. While the cluster elects a leader (a NATS
        node just killed), the read times out (nats TimeoutError, after the JetStream API's
        10 s): ask again, under the job deadline. A second 10-minute run once ended here."""
        assert self.fs.nc is not None
        async with asyncio.timeout(self.cfg.job_deadline_s):
            while True:
                try:
                    history = await EventStore(self.fs.nc).read(subjects.job_events(tenant, job_id))
                    return max((r.seq for r in history if r.type in FINAL_JOB_EVENTS), default=0)
                except (NatsTimeout, NoRespondersError):
                    print(f"[soak] reading job {job_id}: the stream did not answer; asking again")

    async def _final(self, tenant: str, job_id: str, since_seq: int = 0) -> Any:
        try:
            final = await self.fs.wait_final(job_id, tenant=tenant, timeout=self.cfg.job_deadline_s, since_seq=since_seq)
        except TimeoutError:
            self.result.jobs["not final in time"] += 1
            return None
        self.result.jobs[type(final).__name__] += 1
        return final

    # -- the nemesis -----------------------------------------------------------------------------

    def _victims(self) -> list[tuple[str, Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]]:
        out: list[tuple[str, Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]] = []
        for child in self.fs.deployment.commands():
            out.append((child, _bind(self.fs.kill, child), _bind(self.fs.restart, child)))
        for i, node in enumerate(self.fs.nodes):
            out.append((f"nats {node.name}", _bind(self.fs.kill_server, i), _bind(self.fs.restart_server, i)))
        return out

    async def _nemesis(self) -> None:
        victims = self._victims()
        while not self._quiet.is_set():
            try:
                await asyncio.wait_for(self._quiet.wait(), self.rng.expovariate(1.0 / self.cfg.fault_every_s))
                return
            except TimeoutError:
                pass
            name, kill, restart = self.rng.choice(victims)
            down = self.rng.uniform(*self.cfg.down_s)
            at = time.monotonic() - self._start
            await kill()
            self.result.faults[name.split(" ")[0].rstrip("-0123456789")] += 1
            try:
                await asyncio.wait_for(self._quiet.wait(), down)
            except TimeoutError:
                pass
            await restart()
            self.result.fault_log.append(f"{at:7.1f}s kill -9 {name}, down {down:.1f}s")
            print(f"[nemesis] {at:7.1f}s kill -9 {name}, down {down:.1f}s", flush=True)


def _bind(f: Callable[[Any], Awaitable[Any]], arg: Any) -> Callable[[], Awaitable[None]]:
    async def call() -> None:
        await f(arg)

    return call


def _succeeded(final: Any) -> bool:
    return type(final).__name__ == "JobSucceeded"


def _report_dict(report: Report) -> dict[str, Any]:
    return {
        "summary": report.summary(), "jobs": dict(report.jobs), "attempts": report.attempts, "retries": report.retries,
        "lost": report.lost, "duplicates": report.duplicates, "not_final": report.not_final,
        "timed_out": len(report.timed_out), "redelivered": report.redelivered, "late_results": report.late_results,
        "ran_twice_at_once": report.overlapping, "fencing": report.fencing.summary(),
        "problems": report.problems[:100],
    }
