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
- **Nemesis.** At random moments (exponential gaps, mean `fault_every_s`) it injects one fault of
  `soak_faults.py`'s menu: kill -9 of a service or a NATS node, a process isolated, a NATS node
  split from the others (one way too), a link flapping, packet loss, latency between the NATS
  nodes, a graceful restart of a node, a split with a kill; and repairs it after a random pause
  (a killed process started again with the same arguments; a node on the same port and store).
  Partitions need network namespaces (`NetStack`); on a loopback stack only kills and restarts.
- **History.** Every answer the actors get is recorded with its time (`history.History`): the
  requests and their answers, every event read while following a job, each final state, the
  clusters read from the trackers.
- **The end.** The nemesis stops with everything repaired, the actors wait for their jobs, then
  `invariants.check` replays the whole log and checks the history against it. `SoakResult` has
  the figures docs/faults.md reports.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from contracts import subjects
from contracts.commands import (
    VERB_OF,
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
from muster.bus.connect import bearer_headers
from muster.bus.eventstore import EventStore, StoreError
from muster.client import NoAnswer, new_request_id

from .harness import TRANSIENT, FaultStack
from .history import History
from .invariants import TRACKER_TENANT_HEADER, Report
from .soak_faults import pick

_ID = re.compile(r"\b[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}\b")


def _kind_of(reason: str) -> str:
    """A refusal's first words with its ids as <id>: one count per kind, not per job."""
    return " ".join(_ID.sub("<id>", reason).split()[:6])

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
    reads_failed: int = 0
    """Cluster reads a tracker did not answer (it was cut off or killed): not recorded."""
    report: dict[str, Any] = field(default_factory=dict)

    def figures(self) -> dict[str, Any]:
        r = self.report
        return {
            "seconds": round(self.seconds, 1), "operations": sum(self.operations.values()), "requests": self.requests,
            "faults injected": sum(self.faults.values()), "tasks lost": r.get("lost", -1),
            "duplicate attempts": r.get("duplicates", -1), "jobs not final": r.get("not_final", -1),
            "invariant problems": len(r.get("problems", [])), "unanswered": self.unanswered,
            "slowest answer s": r.get("slowest_answer_s", -1), "ran twice at once": r.get("ran_twice_at_once", -1),
            "internal errors": sum(n for why, n in self.rejected.items() if why.startswith("internal error")),
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
        self.history = History()
        self._next = 0
        self._start = 0.0
        self._quiet = asyncio.Event()
        """Set when the nemesis must stop."""

    # -- running -------------------------------------------------------------------------------

    async def run(self) -> SoakResult:
        self._start = time.monotonic()
        nemesis = asyncio.create_task(self._nemesis(), name="nemesis")
        actors = [asyncio.create_task(self._actor(tenant, f"{tenant}-{i}", random.Random(self.rng.random())), name=f"{tenant}-{i}")
                  for tenant in self.cfg.tenants for i in range(self.cfg.actors_per_tenant)]
        try:
            await asyncio.gather(*actors)
        finally:
            self._quiet.set()
            await nemesis  # it restarts whatever it had killed before it returns
        self.result.seconds = time.monotonic() - self._start
        report = await self.fs.check(history=self.history)
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
        final = await self._final(tenant, reply.job_id, since_seq)
        await self._read(tenant, reply.cluster_id)
        return reply, final

    async def _send(self, tenant: str, what: str | None, command: Any) -> Any:
        if what is not None:
            self.result.operations[what] += 1
        self.result.requests += 1
        command = command.model_copy(update={"request_id": command.request_id or new_request_id()})
        seen = self.history.request(_client(), tenant, VERB_OF[command.type], command.request_id)
        try:
            reply = await self.fs.client.request(command, tenant=tenant, timeout=10.0, attempts=12)
        except NoAnswer as err:
            return self._unanswered(tenant, what, str(err))
        seen.answered = time.time()
        if isinstance(reply, Rejected) and reply.retry:  # "send again" on every try: no planner acted for it
            return self._unanswered(tenant, what, reply.reason)
        if isinstance(reply, Rejected):
            seen.outcome, seen.reason = "refused", reply.reason
            self.result.rejected[_kind_of(reply.reason)] += 1
        elif isinstance(reply, Accepted):
            seen.outcome, seen.job_id, seen.cluster_id = "accepted", reply.job_id, reply.cluster_id
            self.result.accepted += 1
        return reply

    def _unanswered(self, tenant: str, what: str | None, words: str) -> None:
        self.result.unanswered += 1
        self.result.unanswered_requests.append(f"{time.monotonic() - self._start:.1f}s {tenant} {what}: {words}")
        print(f"[soak] unanswered: {self.result.unanswered_requests[-1]}")

    async def _read(self, tenant: str, cluster_id: str) -> None:
        """The cluster as a tracker (one of them, at random) answers it now, for the history."""
        url = self.rng.choice(self.fs.tracker_urls())
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http, \
                    http.get(f"{url}/v1/clusters/{cluster_id}", headers={TRACKER_TENANT_HEADER: tenant, **bearer_headers()}) as resp:
                if resp.status == 200:
                    self.history.read(_client(), url, await resp.json())
                    return
        except (aiohttp.ClientError, TimeoutError):
            pass
        self.result.reads_failed += 1

    async def _ended_seq(self, tenant: str, job_id: str) -> int:
        """The sequence of the job's last final event. While the cluster elects a leader (a NATS
        node just killed), the read times out (nats TimeoutError, after the JetStream API's
        10 s): ask again, under the job deadline. A second 10-minute run once ended here."""
        assert self.fs.nc is not None
        async with asyncio.timeout(self.cfg.job_deadline_s):
            for attempt in range(10_000):
                try:
                    history = await EventStore(self.fs.nc).read(subjects.job_events(tenant, job_id))
                    return max((r.seq for r in history if r.type in FINAL_JOB_EVENTS), default=0)
                except (*TRANSIENT, StoreError):  # a 503 comes at once: back off
                    print(f"[soak] reading job {job_id}: the stream did not answer; asking again")
                    await asyncio.sleep(min(2.0, 0.1 * 2**attempt))
        raise TimeoutError(f"job {job_id} could not be read")

    async def _final(self, tenant: str, job_id: str, since_seq: int = 0) -> Any:
        client = _client()
        seen: list[Any] = []

        def read(r: Any) -> None:
            self.history.event(client, r)
            seen.append(r)

        try:
            final = await self.fs.wait_final(job_id, tenant=tenant, timeout=self.cfg.job_deadline_s, since_seq=since_seq,
                                             seen=read)
        except TimeoutError:
            self.result.jobs["not final in time"] += 1
            return None
        self.history.final(client, job_id, seen[-1])
        self.result.jobs[type(final).__name__] += 1
        return final

    # -- the nemesis -----------------------------------------------------------------------------

    async def _nemesis(self) -> None:
        while not self._quiet.is_set():
            try:
                await asyncio.wait_for(self._quiet.wait(), self.rng.expovariate(1.0 / self.cfg.fault_every_s))
                return
            except TimeoutError:
                pass
            fault = pick(self.fs, self.rng)
            down = self.rng.uniform(*self.cfg.down_s)
            at = time.monotonic() - self._start
            await fault.inject()
            self.result.faults[fault.kind] += 1
            try:
                await asyncio.wait_for(self._quiet.wait(), down)
            except TimeoutError:
                pass
            await fault.repair()
            self.result.fault_log.append(f"{at:7.1f}s {fault.what}, {down:.1f}s")
            print(f"[nemesis] {at:7.1f}s {fault.what}, {down:.1f}s", flush=True)


def _client() -> str:
    """The actor (its task's name) a history entry is for."""
    task = asyncio.current_task()
    return task.get_name() if task is not None else "?"


def _succeeded(final: Any) -> bool:
    return type(final).__name__ == "JobSucceeded"


def _report_dict(report: Report) -> dict[str, Any]:
    return {
        "summary": report.summary(), "jobs": dict(report.jobs), "attempts": report.attempts, "retries": report.retries,
        "lost": report.lost, "duplicates": report.duplicates, "not_final": report.not_final,
        "timed_out": len(report.timed_out), "redelivered": report.redelivered, "late_results": report.late_results,
        "ran_twice_at_once": report.overlapping, "fencing": report.fencing.summary(),
        "history": report.history.summary() if report.history else "", "slowest_answer_s": report.history.slowest_answer_s
        if report.history else -1,
        "problems": report.problems[:100],
    }
