"""`muster up --autoscale`: start and drain local provisioner processes on the planners'
recommendation (docs/scaling.md, "Worker scaling").

When does it look? When task events arrive (a core subscription to the log's job and task
subjects; it looks `settle_s` after the first of a burst), and, while it is not at rest, again
when its cool-down ends or the rate window has passed (the planners' arrival rate falls to
zero `window_s` after the last arrival). At rest (no work, the minimum of processes) no timer
runs: nothing polls.

What does it do? `muster.scaling.by_class` compares what the planners say the class needs
with the live capacity of its provisioners (presence records: every provisioner of the class
counts, local or not); the difference in processes of `capacity_each` slots is started or
drained, never beyond `[min_processes, max_processes]` local processes, and not sooner than
`cooldown_s` after the last change. A drained provisioner finishes its tasks in flight and
exits by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

import structlog

from muster.ports.clock import Cancellable, Clock
from muster.scaling import ClassScaling, by_class

log = structlog.get_logger("muster.autoscale")


@dataclass(frozen=True)
class AutoscalePolicy:
    provisioner_class: str = "default"
    min_processes: int = 1
    max_processes: int = 4
    capacity_each: int = 8
    cooldown_s: float = 30.0
    settle_s: float = 1.0
    window_s: float = 60.0
    """The planners' rate window: the recommendation may change this long after the last task."""


class Fleet(Protocol):
    """The local provisioner processes of one class."""

    def count(self) -> int: ...

    async def start_one(self) -> str: ...

    async def drain_one(self) -> str | None: ...


Gather = Callable[[], Awaitable[tuple[Sequence[dict[str, Any]], Sequence[Any]]]]
"""Planner answers on `muster.metrics.planner` and live presence records, read now."""


def decide(scaling: ClassScaling | None, local: int, policy: AutoscalePolicy) -> int:
    """Processes to start (> 0) or drain (< 0), within the bounds (pure)."""
    want = scaling.processes(policy.capacity_each) if scaling is not None else -local
    if local < policy.min_processes:
        want = max(want, policy.min_processes - local)
    if want > 0:
        return min(want, policy.max_processes - local)
    return -min(-want, max(0, local - policy.min_processes))


@dataclass
class Autoscaler:
    fleet: Fleet
    gather: Gather
    clock: Clock
    policy: AutoscalePolicy = field(default_factory=AutoscalePolicy)
    last_change: datetime | None = None
    last_activity: datetime | None = None
    last: ClassScaling | None = None
    actions: list[tuple[datetime, int]] = field(default_factory=list)
    _next: tuple[datetime, Cancellable] | None = None
    _looking: asyncio.Lock = field(default_factory=asyncio.Lock)

    def poke(self) -> None:
        """Task activity: look soon (the first event of a burst sets the time)."""
        now = self.clock.now()
        self.last_activity = now
        self._at(now + timedelta(seconds=self.policy.settle_s))

    def _at(self, when: datetime) -> None:
        if self._next is not None and self._next[0] <= when:
            return  # a look is already due sooner
        if self._next is not None:
            self._next[1].cancel()
        self._next = (when, self.clock.call_at(when, self.evaluate))

    async def evaluate(self) -> int:
        # One look at a time: starting a process takes seconds, and a look that ran meanwhile
        # (task events poke it) saw no change yet and started as many again.
        async with self._looking:
            return await self._evaluate()

    async def _evaluate(self) -> int:
        self._next = None
        now = self.clock.now()
        try:
            answers, presence = await self.gather()
        except Exception as err:  # noqa: BLE001 - the bus is away: look again after a cool-down
            log.warning("autoscale: metrics unavailable", error=str(err) or type(err).__name__)
            self._at(now + timedelta(seconds=self.policy.cooldown_s))
            return 0
        self.last = by_class(answers, presence).get(self.policy.provisioner_class)
        local = self.fleet.count()
        change = decide(self.last, local, self.policy)
        cooling = self.last_change is not None and (now - self.last_change).total_seconds() < self.policy.cooldown_s
        if change and cooling:
            assert self.last_change is not None
            self._at(self.last_change + timedelta(seconds=self.policy.cooldown_s))
            return 0
        if change > 0:
            for _ in range(change):
                log.info("autoscale: starting a provisioner", provisioner=await self.fleet.start_one(), **self._why())
        elif change < 0:
            for _ in range(-change):
                log.info("autoscale: draining a provisioner", provisioner=await self.fleet.drain_one(), **self._why())
        if change:
            now = self.clock.now()  # the cool-down runs from when the change is made
            self.last_change = now
            self.actions.append((now, change))
        if not self._at_rest(local + change):
            later = [now + timedelta(seconds=self.policy.cooldown_s)]
            if self.last_activity is not None:
                later.append(self.last_activity + timedelta(seconds=self.policy.window_s + self.policy.settle_s))
            self._at(max(min(later), now + timedelta(seconds=self.policy.settle_s)))
        return change

    def _at_rest(self, local: int) -> bool:
        s = self.last
        idle = s is None or (s.needed == 0 and s.queue_length == 0 and s.in_progress == 0 and s.arrival_rate_per_s == 0)
        return idle and local <= self.policy.min_processes

    def _why(self) -> dict[str, Any]:
        return self.last.to_json() if self.last is not None else {}

    def stop(self) -> None:
        if self._next is not None:
            with contextlib.suppress(Exception):
                self._next[1].cancel()
            self._next = None


# -- on the bus ----------------------------------------------------------------------------------

ACTIVITY = ("TaskQueued", "TaskSucceeded", "TaskFailed")


def nats_gather(nc: Any, window_s: float = 0.3) -> Gather:
    """What the tracker's /metrics reads, read the same way: every planner's answer within
    the window, and the presence records."""
    from services.provisioner.presence import live_provisioners
    from services.tracker.metrics import PlannerQueues

    planners = PlannerQueues(nc, window=window_s)

    async def gather() -> tuple[Sequence[dict[str, Any]], Sequence[Any]]:
        await planners.refresh()
        return planners.answers, await live_provisioners(nc)

    return gather


async def watch_activity(nc: Any, scaler: Autoscaler) -> list[Any]:
    """Poke the autoscaler on task events (core subscriptions: nothing is stored for it)."""
    from contracts import subjects

    async def on_msg(msg: Any) -> None:
        if (msg.headers or {}).get("Muster-Type") in ACTIVITY:
            scaler.poke()

    return [await nc.subscribe(s, cb=on_msg) for s in (subjects.ALL_JOB_TASK_RECORDS, subjects.ALL_TASK_OUTCOMES)]


class DeploymentFleet:
    """The local provisioner processes of `muster up` (a `Deployment` that supervises its
    children): a new one is added as `provisioner-<n>` with its own id and work dir; a drained
    one is retired first (its exit is expected, not restarted), then asked to drain."""

    def __init__(self, deployment: Any, nc: Any, policy: AutoscalePolicy, tenants: str) -> None:
        self.deployment, self.nc, self.policy, self.tenants = deployment, nc, policy, tenants
        self.retired: set[str] = set()

    def _mine(self) -> list[str]:
        return [c.name for c in self.deployment.children
                if c.name.startswith("provisioner") and c.name not in self.retired and c.process.returncode is None]

    def count(self) -> int:
        return len(self._mine())

    async def start_one(self) -> str:
        taken = {c.name for c in self.deployment.children} | self.retired
        n = next(i for i in range(1, 10_000) if f"provisioner-{i}" not in taken)
        name = f"provisioner-{n}"
        await self.deployment.add(name, [
            "provisioner", "--capacity", str(self.policy.capacity_each), "--tenants", self.tenants,
            "--class", self.policy.provisioner_class, "--id", name, "--work-dir", str(self.deployment.data_dir / name),
        ])
        return name

    async def drain_one(self) -> str | None:
        from services.provisioner.app import request_drain

        mine = self._mine()
        if not mine:
            return None
        name = max(mine, key=lambda n: (n != "provisioner", n))  # the newest first, the original last
        self.deployment.retire(name)
        self.retired.add(name)
        provisioner_id = self._id_of(name)
        await request_drain(self.nc, provisioner_id)
        return name

    def _id_of(self, name: str) -> str:
        args = self.deployment.child(name).args
        return str(args[args.index("--id") + 1]) if "--id" in args else name


@contextlib.asynccontextmanager
async def autoscaling(deployment: Any, policy: AutoscalePolicy, tenants: str) -> AsyncIterator[Autoscaler]:
    """`muster up --autoscale`: an autoscaler for the deployment's provisioners, on a connection
    of its own, looking when task events arrive; stopped (timers, subscriptions) on the way out,
    before the deployment stops."""
    from muster.ports.clock import AsyncioClock

    link = _Link(deployment)
    nc = await link.open()
    fleet = DeploymentFleet(deployment, nc, policy, tenants)
    scaler = Autoscaler(fleet, nats_gather(nc), AsyncioClock(), policy)
    link.fleet, link.scaler = fleet, scaler
    link.subs = await watch_activity(nc, scaler)
    try:
        yield scaler
    finally:
        scaler.stop()
        await link.close()


class _Link:
    """The autoscaler's connection. nats-py gives a connection up for good on some errors of the
    server (an auth check while a reload of rotated certificates runs: docs/security.md, "TLS");
    `muster up` cannot exit to be started again as its services do, so this one is made again,
    and the autoscaler goes on with it."""

    def __init__(self, deployment: Any) -> None:
        self.deployment = deployment
        self.nc: Any = None
        self.fleet: DeploymentFleet | None = None
        self.scaler: Autoscaler | None = None
        self.subs: list[Any] = []
        self.closing = False
        self.again: asyncio.Task[None] | None = None

    async def open(self) -> Any:
        from muster.bus.connect import connect

        # The data directory: where its CA (and, with mutual TLS, the user's certificate) is.
        self.nc = await connect(self.deployment.nats_url, name="muster-autoscale", token=self.deployment.admin_token(),
                                data_dir=self.deployment.data_dir, closed_cb=self._closed)
        return self.nc

    async def _closed(self) -> None:
        if not self.closing:
            log.warning("the autoscaler's connection to NATS was closed for good; connecting again")
            self.again = asyncio.ensure_future(self._reopen())

    async def _reopen(self) -> None:
        nc = await self.open()  # (connecting waits for NATS without end)
        assert self.fleet is not None and self.scaler is not None
        self.fleet.nc, self.scaler.gather = nc, nats_gather(nc)
        self.subs = await watch_activity(nc, self.scaler)

    async def close(self) -> None:
        self.closing = True
        if self.again is not None:
            self.again.cancel()
            await asyncio.gather(self.again, return_exceptions=True)
        for sub in self.subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        if self.nc is not None:
            await self.nc.close()
