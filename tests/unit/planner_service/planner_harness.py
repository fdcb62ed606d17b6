"""The planner's service layer on in-memory fakes: a log, a task queue, a clock that moves when
told, the demo catalog, and stand-ins for the solver and the provisioners.

`settle()` plays the bus: every new event goes through the planner's routing table (as its
durable consumers would deliver it), every `LayoutRequested` is answered by the real (pure)
solver, and every queued task is taken by a worker whose behaviour a test chooses per task
(succeed, fail, stay silent, or hold it until released). It runs until nothing moves: no
wall time, no sleeps, the same outcome every run.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from contracts import subjects
from contracts.catalog import Action, Catalog, Service
from contracts.commands import VERB_OF, Accepted, CreateCluster, DryRun, LeaseExtended, Rejected
from contracts.events import FINAL_JOB_EVENTS, LayoutRequested, TaskClaimed, TaskFailed, TaskSucceeded
from contracts.identity import PermissionGranted, PrincipalCreated, Scope, TenantCreated
from contracts.layout import Layout
from contracts.tasks import TaskMessage
from muster.catalog.files import load_catalog
from muster.ports.eventlog import Append, ConcurrencyError, Recorded
from muster.ports.memory import ManualClock, MemoryEventLog, MemoryTaskQueue, matches
from muster.routing import router
from services.auth.domain.state import IdentityState
from services.planner.app import Planner, PlannerConfig
from services.planner.bootstrap import bootstrap
from services.planner.domain.cluster import Cluster
from services.planner.domain.job import UNRUN, Job
from services.planner.messages import RequestContext
from services.planner.ports import NoLayout
from services.planner.routing import ROUTES
from services.pool.domain.pool import Pool
from services.solver.service import answer

DEMO = Path(__file__).parents[3] / "muster" / "demo" / "catalog"
Behaviour = Literal["succeed", "fail", "silent", "hold", "lose", "refuse"]
SIMPLE = {"provisioner": {"actions": {a: {"type": "simulated", "fields": {}} for a in ("install", "start", "remove")}}}
"""A service with no dependencies, for tests that add one to the demo catalog."""
CHECKED = {"provisioner": {"actions": {a: {"type": "simulated", "fields": {}}
                                       for a in ("install", "configure", "start", "stop", "status")}}}
"""The same with `status` (and stop, configure): its starts and stops are checked."""


def demo_catalog(**extra_services: dict[str, Any]) -> Catalog:
    """The demo catalog; extra services join it and the hadoop-small template's allowed ones. The
    demo's `status` actions are left out: these tests check service state with `checked` alone."""
    catalog = load_catalog(DEMO)
    for service in catalog.services.values():
        service.provisioner.actions.pop(Action.STATUS, None)
    for name, body in extra_services.items():
        catalog.services[name] = Service.model_validate({"name": name, "description": name, **body})
        catalog.clustertemplates["hadoop-small"].compatibility.services.append(name)
    return catalog


class Catalogs:
    """The catalog source port: one catalog per tenant, replaced at will."""

    def __init__(self, catalog: Catalog) -> None:
        self.by_tenant: dict[str, Catalog] = {"default": catalog}

    async def load(self, tenant: str, up_to_seq: int | None = None) -> tuple[Catalog, int]:
        """Always the one catalog, at a position of its own: a job runs with the tenant's catalog
        as last read (tests of a job that keeps its catalog read it from the log)."""
        return self.by_tenant.get(tenant, Catalog()), 1


class Solver:
    """Dry runs: the real solver's pure answer, as the solvers' request/reply subject gives it."""

    async def solve(self, tenant: str, request: LayoutRequested) -> Layout:
        result = answer(request, "solver-fake")
        if result.type != "LayoutSolved":
            raise NoLayout(result.message, tuple(result.fields))  # (as the NATS adapter reads the answer)
        return result.layout


class OwnedWhere:
    """The ownership port by a predicate of (tenant, cluster id), settled at once."""

    def __init__(self, owns: Callable[[str, str], bool]) -> None:
        self.predicate = owns

    def owns(self, tenant: str, cluster_id: str) -> bool:
        return self.predicate(tenant, cluster_id)

    async def settle(self, tenant: str, cluster_id: str) -> None:
        return None


class Harness:
    def __init__(self, config: PlannerConfig | None = None, catalog: Catalog | None = None,
                 log: MemoryEventLog | None = None, **ports: Any) -> None:
        """`ports`: what `bootstrap` takes besides the fakes (ownership, admission, dispatch,
        pools, identities)."""
        self.clock = ManualClock()
        self.log = log or MemoryEventLog(self.clock)
        self.queue = MemoryTaskQueue()
        self.catalogs = Catalogs(catalog or demo_catalog())
        self.config = config or PlannerConfig(instance="planner-test")
        self.ports = ports
        self.workers: Any = None
        """The planner's view of live provisioners (None: it has none, and never warns)."""
        self.planner = self._planner()
        self.cursor = 0
        self.behaviour: Callable[[TaskMessage], Behaviour] = lambda m: "succeed"
        self.held: list[TaskMessage] = []
        self.refused: list[TaskMessage] = []
        """Tasks whose claim their job's cancel fence refused (never run)."""
        self.stopped: set[tuple[str, str]] = set()
        """(node, service) the workers stopped: what their `status` answers (else running)."""
        self.states: dict[tuple[str, str], str] = {}
        """(node, service) -> what `status` answers there, whatever ran (a test's override)."""
        self.solving = True
        self.ran_segments: list[list[str]] = []
        """The steps of each segment message run (a head and its `then`)."""

    def _planner(self) -> Planner:
        planner = bootstrap(self.log, self.queue, self.config, catalogs=self.catalogs, solver=Solver(), clock=self.clock,
                            workers=self.workers, **self.ports)
        self.routes = [(r.filter, router(planner, r)) for r in ROUTES]
        return planner

    async def restart(self, config: PlannerConfig | None = None) -> Planner:
        """A planner dies (its timers with it) and another, rebuilt from the same log, takes
        over; events already delivered to the dead one are not delivered again."""
        self.planner.timers.cancel_all()
        self.config = config or self.config
        self.planner = self._planner()
        await self.planner.resume()
        return self.planner

    # -- requests -------------------------------------------------------------------------------

    async def send(self, command: Any, tenant: str = "default", principal: str | None = None) -> Accepted | Rejected | DryRun | LeaseExtended:
        body = command.model_dump_json().encode()
        return await self.send_raw(VERB_OF[command.type], body, tenant, principal)

    async def send_raw(self, verb: str, body: bytes, tenant: str = "default", principal: str | None = None) -> Accepted | Rejected | DryRun | LeaseExtended:
        return await self.planner.handle(RequestContext(tenant=tenant, verb=verb, body=body, principal=principal))

    async def ok(self, command: Any) -> Accepted:
        """Send, expect Accepted, run the job to its end, expect success."""
        reply = await self.send(command)
        assert isinstance(reply, Accepted), reply
        await self.settle()
        assert self.job(reply.job_id).state == "succeeded", self.job(reply.job_id).view()["error"]
        return reply

    async def cluster_of(self, nodes: int = 3, name: str = "c1") -> str:
        from contracts.commands import CreateCluster

        return (await self.ok(CreateCluster(name=name, template="hadoop-small", nodes=nodes))).cluster_id

    # -- the bus, played ----------------------------------------------------------------------

    async def settle(self) -> None:
        """Deliver events and run tasks until nothing moves."""
        moved = True
        while moved:
            moved = False
            while self.cursor < len(self.log.records):
                recorded = self.log.records[self.cursor]
                self.cursor += 1
                await self.deliver(recorded)
                moved = True
            for message in self.queue.take():
                await self.work(message)
                moved = True

    async def deliver(self, recorded: Recorded) -> None:
        """One event to whoever consumes it: the solver, and the planner's routes."""
        if isinstance(recorded.event, LayoutRequested) and self.solving:
            result = answer(recorded.event, "solver-fake")
            try:
                await self.log.append(recorded.subject, [Append(result, msg_id=f"{result.job_id}:answer:{recorded.seq}")],
                                      expect_last_seq=recorded.seq)
            except ConcurrencyError:
                pass
        for subject_filter, handler in self.routes:
            if matches(subject_filter, recorded.subject):
                await handler(recorded)

    async def work(self, message: TaskMessage, behaviour: Behaviour | None = None) -> None:
        """Run a message's task; a segment's steps after it in order, while each succeeds
        (as `WorkerCore` runs them). A held step holds the rest of the message with it."""
        if not message.then:
            await self._work(message, behaviour)
            return
        first = behaviour or self.behaviour(message)  # (once: a behaviour may count its calls)
        if first == "hold":
            self.held.append(message)
            return
        steps = steps_of(message)
        self.ran_segments.append([s.task_id for s in steps])
        for i, step in enumerate(steps):
            now = first if i == 0 else self.behaviour(step)
            if now == "hold":  # (the provisioner is still at this step: the rest waits with it)
                self.held.append(message.model_copy(update={**dict(message.then[i - 1]), "then": message.then[i:]}))
                return
            if not await self._work(step, now):
                return

    async def _work(self, message: TaskMessage, behaviour: Behaviour | None = None) -> bool:
        """Run one step; whether it succeeded (a segment goes on only then)."""
        behaviour = behaviour or self.behaviour(message)
        if behaviour == "hold":
            self.held.append(message)
            return False
        from contracts import subjects

        subject = subjects.task_events(message.tenant, message.job_id, message.task_id, "prov-fake")
        key = f"{message.job_id}.{message.task_id}.{message.attempt}"
        common = dict(job_id=message.job_id, task_id=message.task_id, attempt=message.attempt, provisioner="prov-fake", worker="w1")
        try:  # keyed and fenced as a provisioner's claim is (WorkerCore; docs/decisions/0046)
            await self.log.append(subject, [Append(TaskClaimed(**common), msg_id=f"{key}.claim.1", only_if_empty=message.fence)])  # type: ignore[arg-type]
        except ConcurrencyError:
            self.refused.append(message)  # its job was cancelled first: never run
            return False
        if behaviour == "silent":
            return False
        if behaviour in ("fail", "lose", "refuse"):  # lose: a create that asked the cloud and lost the answer;
            # refuse: a failure no retry can mend (refused credentials, an unknown image)
            outcome: Any = TaskFailed(**common, error="simulated refusal" if behaviour == "refuse" else "simulated failure",  # type: ignore[arg-type]
                                      may_have_made=behaviour == "lose", permanent=behaviour == "refuse")
        else:
            outcome = TaskSucceeded(**common, **_results(message, self.stopped, self.states))  # type: ignore[arg-type]
        await self.log.append(subject, [Append(outcome, msg_id=f"{key}.outcome")])
        return isinstance(outcome, TaskSucceeded)

    async def release(self) -> None:
        """Run the held tasks (as they now behave), then settle."""
        held, self.held = self.held, []
        for message in held:
            await self.work(message, self.behaviour(message) if self.behaviour(message) != "hold" else "succeed")
        await self.settle()

    # -- looking ----------------------------------------------------------------------------------

    def sent(self) -> list[TaskMessage]:
        """Every attempt sent, in order: each message's head and its segment's steps after it,
        each a message of its own (as `work` runs them). What a test of which attempts went out
        reads, whether they went one by one or in segments (docs/decisions/0058)."""
        return [step for m in self.queue.messages for step in steps_of(m)]

    def claimed(self, job_id: str) -> list[tuple[str, int]]:
        """The job's attempts a provisioner claimed (so ran, or began to), in log order: what
        ran, whether it was sent alone or as a segment's step (a failure stops the rest)."""
        return [(r.event.task_id, r.event.attempt) for r in self.log.records
                if r.type == "TaskClaimed" and r.event.job_id == job_id]

    def failures(self, job_id: str) -> list[Any]:
        """The job's attempts that failed or timed out (`TaskAttemptFailed`), without the
        segments' followers ended unrun when the step before them failed (`job.UNRUN`:
        no failure, their attempt given back)."""
        return [e for e in self.events(job_id, "TaskAttemptFailed") if e.error not in UNRUN]

    def job(self, job_id: str) -> Job:
        return self.planner.jobs[job_id]

    def cluster(self, cluster_id: str) -> Cluster:
        return self.planner.clusters[cluster_id]

    def services(self, cluster_id: str) -> dict[str, set[str]]:
        return {n.id: set(n.services) for n in self.cluster(cluster_id).nodes.values()}

    def history(self, job_id: str, tenant: str = "default") -> list[str]:
        """The types of the job's events and task records, in log order (not the fence's markers)."""
        return [r.type for r in self.job_records(job_id, tenant) if r.type != "TasksRecorded"]

    def job_records(self, job_id: str, tenant: str = "default") -> list[Any]:
        own = subjects.job_filters(tenant, job_id)
        return [r for r in self.log.records if r.subject in own]

    def final(self, job_id: str, tenant: str = "default") -> Any:
        """The job's final event (JobSucceeded, JobRolledBack, ...), None while it runs."""
        found = [r.event for r in self.job_records(job_id, tenant) if r.type in FINAL_JOB_EVENTS]
        return found[-1] if found else None

    def events(self, job_id: str, event_type: str, tenant: str = "default") -> list[Any]:
        return [r.event for r in self.job_records(job_id, tenant) if r.type == event_type]


def _results(message: TaskMessage, stopped: set[tuple[str, str]], states: dict[tuple[str, str], str]) -> dict[str, Any]:
    """What a provider reports: a machine id from create, an address from confirm."""
    node = message.node.id
    if message.action.value == "create":
        return {"result": {"providerid": f"sim-{node}-{message.attempt}"}}
    if message.action.value == "status" and message.service:  # as the simulated automator: what it last did there
        key = (message.node.id, message.service.name)
        return {"result": {"state": states.get(key, "stopped" if key in stopped else "running")}}
    if message.action.value in ("start", "stop") and message.service:
        (stopped.add if message.action.value == "stop" else stopped.discard)((message.node.id, message.service.name))
    if message.action.value == "confirm":
        return {"ipaddresses": {"access_v4": f"10.0.0.{message.node.nodenum % 250}"}, "hostname": f"{node}.example"}
    return {}


def published(h: Harness) -> list[TaskMessage]:
    """Every message the planner publishes from now on, de-duplicated by the queue or not."""
    sent: list[TaskMessage] = []
    publish = h.queue.publish

    async def recording(message: TaskMessage) -> None:
        sent.append(message)
        await publish(message)
    h.queue.publish = recording  # type: ignore[method-assign]
    return sent


def steps_of(message: TaskMessage) -> list[TaskMessage]:
    """A message's attempts in the order a provisioner runs them: its head, then its segment's
    steps (`then`), each a message of its own."""
    if not message.then:
        return [message]
    rest = [TaskMessage.model_construct(**dict(step)) for step in message.then]
    return [message.model_copy(update={"then": []}), *rest]


def body(data: dict[str, Any]) -> bytes:
    return json.dumps(data).encode()


def identities(*grants: tuple[str, str, Scope]) -> IdentityState:
    """Identities of tenant `default`: super admin `root` and users reader, operator, builder with `grants`."""
    state = IdentityState()
    events: list[Any] = [TenantCreated(tenant="default", by="root"),
                         PrincipalCreated(principal="root", role="super_admin", by="boot"),
                         *(PrincipalCreated(principal=p, role="user", tenant="default", by="root") for p in ("reader", "operator", "builder"))]
    events += [PermissionGranted(principal=p, permission=perm, scope=scope, by="root") for p, perm, scope in grants]  # type: ignore[arg-type]
    for seq, e in enumerate(events, 1):
        state.apply(e, seq)
    return state


def unsolvable(h: Harness, name: str = "nolayout", **fields: Any) -> CreateCluster:
    """A create admission accepts and the solver finds no layout for: on template `no-layout`
    (hadoop-small whose zookeeper-server needs hardware type small) with large nodes asked for.
    (Services missing what they require are refused at admission: they no longer make one.)"""
    catalog = h.catalogs.by_tenant["default"]
    if "no-layout" not in catalog.clustertemplates:
        template = catalog.clustertemplates["hadoop-small"].model_copy(deep=True, update={"name": "no-layout"})
        template.constraints.services["zookeeper-server"].hardwaretypes = ["small"]
        catalog.clustertemplates["no-layout"] = template
    return CreateCluster(name=name, template="no-layout", hardwaretype="large", **{"nodes": 2, **fields})


def fails_creates(times: int, node: str = "n1000") -> Any:
    """A behaviour: the first `times` attempts to create `node` fail (a provider out of that
    machine); everything else succeeds."""
    seen: Counter[str] = Counter()

    def behaviour(m: TaskMessage) -> str:
        if m.action.value == "create" and m.node.id.endswith(node) and seen["create"] < times:
            seen["create"] += 1
            return "fail"
        return "succeed"

    return behaviour


KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4"
"""A host key for the pools' hosts (never used to connect)."""


class Mirror:
    """The pools as the planner's live fold holds them (`services.pool.mirror.PoolMirror`), for a
    planner given pools without a pool service."""

    def __init__(self) -> None:
        self.pools: dict[str, Pool] = {}
        self.watchers: list[Callable[..., Any]] = []

    def watch(self, watcher: Callable[..., Any]) -> None:
        self.watchers.append(watcher)


def checked_harness() -> Harness:
    """The demo catalog with the `checked` service (CHECKED) on every node of hadoop-small."""
    catalog = demo_catalog(checked=CHECKED)
    catalog.clustertemplates["hadoop-small"].defaults.services.append("checked")
    return Harness(catalog=catalog)
