"""Real processes, started as a user starts them (`Deployment`: `python -m muster <service>
--nats-url ...`, readiness from each one's "started" log line), on one nats-server or on a
3-node loopback cluster, with a way to kill -9 and restart any of them by PID.

    async with FaultStack.single(tmp_path) as fs:          # or FaultStack.cluster(tmp_path)
        await fs.load_demo_catalog("default")
        reply = await fs.client.send("default", CreateCluster(...))
        await fs.kill("planner"); await fs.restart("planner")
        await fs.kill_server(); await fs.restart_server()

Everything listens on 127.0.0.1; every wait has a deadline; `stop` (or leaving the `async
with`) stops every process this stack started, by its PID.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import ConnectionClosedError, NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import DeliverPolicy
from nats.js.errors import BadRequestError, ServiceUnavailableError

from contracts import subjects
from contracts.catalog import Catalog, Service
from contracts.commands import Accepted
from contracts.events import EVENT_TYPES, FINAL_JOB_EVENTS
from muster.bus.cluster import NODES, ClusterNode, start_loopback_cluster
from muster.bus.connect import connect
from muster.bus.eventstore import EventStore, Recorded, inflate, recorded_from_msg
from muster.bus.server import NatsServer
from muster.bus.streams import ensure_streams
from muster.bus.wire import flush
from muster.catalog.files import load_catalog
from muster.catalog.store import apply_catalog
from muster.client import MusterClient
from muster.runtime.supervisor import Deployment
from muster.runtime.tls import DeploymentTls
from muster.tls.ca import LocalCA
from muster.tls.context import http_ssl
from muster.tls.natsconf import ServerTls
from services.auth.keys import AuthKeys, server_auth_config

from .history import History
from .invariants import Report, check

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 90.0
"""How long each service has to say it started (`muster up`'s 60 s): a fault scenario starts
eight or more at once, often while the other worker starts its own; at load 15-20 a planner or a
tracker outlasted 30 s (4 scenarios in 2 runs of tests/fault, before any fault)."""
DEMO = ROOT / "muster" / "demo" / "catalog"
PEER_OFFLINE = 10005
TRANSIENT = (TimeoutError, NoRespondersError, ServiceUnavailableError)
"""What a read meets for a moment while a stream elects a leader, or while the client moves to
another node (nats' TimeoutError is a TimeoutError): asked again."""


def nth(event_type: str, n: int) -> Callable[[Recorded], bool]:
    """A predicate for `FaultStack.when`: true from the n-th event of that type on."""
    seen = 0

    def predicate(r: Recorded) -> bool:
        nonlocal seen
        seen += r.type == event_type
        return seen >= n

    return predicate


async def _quiet(*_: Any) -> None:
    """The test's own connection: the faults it causes are not news."""


def demo_catalog(**provider_fields: str) -> Catalog:
    """The demo catalog, with the simulated provider's fields changed (latency, failures)."""
    catalog = copy.deepcopy(load_catalog(DEMO))
    sim = catalog.providers["sim"]
    catalog.providers["sim"] = sim.model_copy(update={"provisioner": {**sim.provisioner, **provider_fields}})
    return catalog


def fault_options(base: Path, provisioners: int = 1) -> dict[str, list[str]]:
    """Options for quick recovery: a dead provisioner's task comes back after 2 s; an event a
    killed planner had been handed but not acknowledged comes back to the new one after 5 s (the
    default, 30 s, was most of scenario 2's time); a killed planner's shard leases expire after
    3 s, as in scenario 8 (the default, 10 s, was most of what remained); an attempt with no outcome for 60 s fails (a
    lost task would show as a timeout, which the checks report). Each provisioner has its own id
    and work dir under `base`."""
    options: dict[str, list[str]] = {
        "planner": ["--task-timeout", "60", "--ack-wait", "5", "--lease-ttl", "3"],
        "provisioner": ["--ack-wait", "2"],
    }
    names = ["provisioner"] if provisioners == 1 else [f"provisioner-{i}" for i in range(1, provisioners + 1)]
    for i, name in enumerate(names, 1):
        options[name] = [*options.get(name, []), "--id", f"prov-{i}", "--work-dir", str(base / "work" / name)]
    return options


BROKEN = {
    "name": "broken", "description": "installs, but never starts; its removal is slow",
    "dependencies": {"install": {"requires": ["base"]}},
    "provisioner": {"actions": {
        "install": {"type": "simulated", "fields": {"script": "install broken"}},
        "start": {"type": "simulated", "fields": {"failure_rate": "1"}},
        "remove": {"type": "simulated", "fields": {"latency_ms": "1500"}},
    }},
}


def with_broken_service(catalog: Catalog) -> Catalog:
    """`broken` added to the catalog and allowed by hadoop-small: adding it always fails (its
    start fails every attempt) and rolls back (its removal takes 1.5 s)."""
    catalog.services["broken"] = Service.model_validate(BROKEN)
    catalog.clustertemplates["hadoop-small"].compatibility.services.append("broken")
    return catalog


async def create_streams(nc: Client, replicas: int, timeout: float = 30.0) -> None:
    """Declare the streams on a cluster that has just elected a meta leader. It may not have
    heard from every peer yet, and refuses a 3-replica stream ("peer offline", 10005) until it
    has; the server tells a client outside the system account no event for that, so this one
    call is retried on that one error, under a deadline. It is retried on a timeout too: on a
    loaded host a young cluster's first stream can take longer than the request's 5 s to
    elect its group, and declaring the streams again is idempotent."""

    async def until_created() -> None:
        for _ in range(int(timeout / 0.1)):
            try:
                await ensure_streams(nc.jetstream(), replicas=replicas)
                return
            except NatsTimeout:
                continue
            except BadRequestError as err:
                if err.err_code != PEER_OFFLINE:
                    raise
            await asyncio.sleep(0.1)

    await asyncio.wait_for(until_created(), timeout)


def _node_certificates(tls: DeploymentTls, renew: bool = False) -> dict[str, ServerTls]:
    """Each loopback node's certificate, from the deployment's CA (made first when missing)."""
    tls.prepare()
    ca = LocalCA.load_or_create(tls.folder)
    out = {}
    for name in NODES:
        pair = (ca.issue if renew else ca.ensure)(tls.folder / "servers" / name, f"muster {name}", ["127.0.0.1"])
        out[name] = ServerTls(str(pair.cert), str(pair.key), str(tls.ca))
    return out


@dataclass
class FaultStack:
    base: Path
    deployment: Deployment
    server: NatsServer | None = None
    nodes: list[ClusterNode] = field(default_factory=list)
    nc: Client | None = None
    client: MusterClient = field(init=False)

    # -- starting ------------------------------------------------------------------------------

    @classmethod
    async def single(cls, base: Path, *, tenants: str = "default", provisioners: int = 1, capacity: int = 8,
                     extra_args: dict[str, list[str]] | None = None, planners: int = 1) -> FaultStack:
        keys = AuthKeys.load_or_create(base / "auth")
        server = await NatsServer(base / "nats", auth=server_auth_config(keys.issuer_public, keys.bus_secret)).start()
        options = fault_options(base, provisioners)
        for name, args in (extra_args or {}).items():
            options[name] = [*options.get(name, []), *args]
        deployment = Deployment(base / "deploy", nats_url=server.url, capacity=capacity, tenants=tenants,
                                replicas={"provisioner": provisioners, "planner": planners}, extra_args=options, auth_dir=base / "auth",
                                start_timeout_s=START_TIMEOUT_S)
        return await cls(base, deployment, server=server)._start()

    @classmethod
    async def cluster(cls, base: Path, *, replicas: dict[str, int], extra_args: dict[str, list[str]],
                      tenants: str = "default", capacity: int = 8, tls: bool = False) -> FaultStack:
        """Three nats-server processes with cluster routes on loopback (rendered as
        deploy/nats/*.conf is), streams with 3 replicas (the caller sets MUSTER_REPLICAS=3).
        With `tls`, as compose runs them: TLS on the client ports and the routes, each node with
        its own certificate of one CA (`<base>/tls`), the tracker on HTTPS, every client verifying."""
        keys = AuthKeys.load_or_create(base / "auth")
        deployment_tls = DeploymentTls(base / "tls") if tls else None
        node_tls = _node_certificates(deployment_tls) if deployment_tls else None
        nodes, url = await start_loopback_cluster(base / "nats", auth=server_auth_config(keys.issuer_public, keys.bus_secret),
                                                  tls=node_tls)
        stack_: FaultStack | None = None
        try:
            # With TLS, a process that exits unasked is started again, as by `muster up` or
            # compose (a rotation's reload can end a connection for good: docs/security.md).
            deployment = Deployment(base / "deploy", nats_url=url, capacity=capacity, tenants=tenants,
                                    replicas=replicas, extra_args=extra_args, auth_dir=base / "auth", tls=deployment_tls,
                                    supervise=tls, start_timeout_s=START_TIMEOUT_S)
            stack_ = cls(base, deployment, nodes=nodes)
            await deployment.start_auth()
            await stack_._create_streams(int(os.environ.get("MUSTER_REPLICAS", "1")))
            return await stack_._start()
        except BaseException:
            if stack_ is None:
                for n in nodes:
                    await n.stop()
            else:
                await stack_.stop()
            raise

    @property
    def url(self) -> str:
        assert self.deployment.nats_url
        return self.deployment.nats_url

    @property
    def conn(self) -> Client:
        """The test's own connection (there while the stack runs)."""
        assert self.nc is not None, "the stack is not running"
        return self.nc

    async def _connect(self) -> None:
        if self.nc is None:  # (with TLS, the CA is found in <base>/tls)
            self.nc = await connect(self.url, name="fault-test", error_cb=_quiet, disconnected_cb=_quiet, data_dir=self.base)
            self.client = MusterClient(self.nc)

    async def _create_streams(self, replicas: int) -> None:
        await self._connect()
        assert self.nc is not None
        await create_streams(self.nc, replicas)

    async def _start(self) -> FaultStack:
        try:
            await self.deployment.start_auth()  # the test's own connection goes through it too
            await self._connect()
            assert self.nc is not None
            await ensure_streams(self.nc.jetstream(), replicas=int(os.environ.get("MUSTER_REPLICAS", "1")))
            await self.deployment.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aenter__(self) -> FaultStack:
        return self

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        await self.stop()
        if isinstance(e, Exception):  # what the services said, in the failure's captured output
            print(service_log_tails(self.deployment.data_dir / "logs"), file=sys.stderr)

    async def stop(self) -> None:
        if self.nc is not None and not self.nc.is_closed:
            await self.nc.close()
        await self.deployment.stop()
        if self.server is not None:
            await self.server.stop()
        for n in self.nodes:
            await n.stop()

    # -- the catalog ------------------------------------------------------------------------

    async def load_catalog(self, tenant: str, catalog: Catalog) -> None:
        assert self.nc is not None
        await apply_catalog(EventStore(self.nc), tenant, catalog, by="fault-test")

    # -- faults -----------------------------------------------------------------------------

    def pids(self) -> dict[str, int]:
        return {c.name: c.pid for c in self.deployment.children}

    async def kill(self, name: str) -> int:
        """kill -9 a service process by its PID."""
        return await self.deployment.kill(name)

    async def restart(self, name: str) -> int:
        return (await self.deployment.restart(name)).pid

    async def kill_server(self, node: int | None = None) -> str:
        """kill -9 the nats-server (or one cluster node); returns its name."""
        server = self.server if node is None else self.nodes[node]
        assert server is not None and server.process is not None
        os.kill(server.process.pid, signal.SIGKILL)
        await asyncio.wait_for(server.process.wait(), 10)
        server.process = None
        return server.name

    async def rotate_certificates(self) -> list[str]:
        """New certificates (new keys, same CA) for every node and the tracker, each reloaded in
        place (a config reload of each node, SIGHUP to the tracker); returns what reloaded."""
        assert self.deployment.tls is not None, "a stack started with tls=True"
        for name in _node_certificates(self.deployment.tls, renew=True):
            await next(n for n in self.nodes if n.name == name).reload()
        return [n.name for n in self.nodes] + await self.deployment.rotate_certificates()

    async def restart_server(self, node: int | None = None) -> None:
        """Start it again on the same port with the same store."""
        server = self.server if node is None else self.nodes[node]
        assert server is not None
        await server.start()

    # -- watching the log -------------------------------------------------------------------

    async def _watch(self, subject: str, predicate: Callable[[Recorded], bool]) -> tuple[Any, asyncio.Future[Recorded]]:
        """A core subscription (sees each event as it is published) and the first match."""
        assert self.nc is not None
        found: asyncio.Future[Recorded] = asyncio.get_running_loop().create_future()

        async def on_msg(msg: Msg) -> None:
            if found.done() or not msg.headers:
                return
            model = EVENT_TYPES.get(msg.headers.get("Muster-Type", ""))
            if model is None:
                return
            try:
                event = model.model_validate_json(msg.data)
            except ValueError:
                return
            r = Recorded(seq=0, subject=msg.subject, time=datetime.now(UTC), event=event)
            if predicate(r):
                found.set_result(r)

        sub = await self.nc.subscribe(subject, cb=on_msg)
        await flush(self.nc)  # the server has it before the action runs or the log is read
        return sub, found

    async def when(self, subject: str, predicate: Callable[[Recorded], bool], action: Callable[[], Awaitable[Any]],
                   timeout: float = 60.0) -> Recorded:
        """Subscribe (core NATS: sees each event as it is published), then run `action`, and
        return the first event on `subject` matching `predicate`."""
        sub, found = await self._watch(subject, predicate)
        try:
            await action()
            return await asyncio.wait_for(found, timeout)
        finally:
            await sub.unsubscribe()

    async def seen(self, subject: str, predicate: Callable[[Recorded], bool], timeout: float = 60.0) -> Recorded:
        """The first event on `subject` (a filter) matching `predicate`, in the log already or
        to come."""
        return (await self.follow(subject, lambda events: predicate(events[-1]), timeout))[-1]

    async def follow(self, subject: str, done: Callable[[list[Recorded]], bool], timeout: float = 60.0) -> list[Recorded]:
        """The events on `subject` (a filter) once `done(events)` holds, checked on each as the
        log hands it over: an ordered consumer from the first event gives every stored event,
        once, in order. A core subscription and a read of the log (what `seen` was) misses an
        event published before the subscription reached the server and stored after the read;
        the pools scenario waited out its deadline on that once in CI."""
        store = EventStore(self.conn)
        events: list[Recorded] = []
        met: asyncio.Future[list[Recorded]] = asyncio.get_running_loop().create_future()

        async def on_msg(msg: Msg) -> None:
            if met.done():
                return
            events.append(await inflate(store.bodies, recorded_from_msg(msg)))
            if done(events):
                met.set_result(list(events))

        sub = await store.js.subscribe(subject, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL, cb=on_msg)
        try:
            return await asyncio.wait_for(met, timeout)
        finally:
            await sub.unsubscribe()

    def sending(self, tenant: str, command: Any, replies: list[Accepted]) -> Callable[[], Awaitable[None]]:
        """An action for `when`: send `command`, expect it accepted, keep the reply."""

        async def send() -> None:
            reply = await self.client.send(tenant, command)
            assert isinstance(reply, Accepted), reply
            replies.append(reply)

        return send

    async def wait_final(self, job_id: str, tenant: str = "default", timeout: float = 120.0, since_seq: int = 0,
                         seen: Callable[[Recorded], None] | None = None) -> Any:
        """The job's final event (`seen` is told of every event read on the way). While a
        cluster elects a new leader for the stream, creating the consumer `MusterClient.events`
        reads with times out (nats TimeoutError, after the JetStream API's 5 s), or is refused
        for a moment (503, "JetStream system temporarily unavailable", right after a partition
        heals): subscribe again from the last event read, under the same overall deadline.
        Past the deadline, the job's last events in the log say where it stopped."""
        try:
            async with asyncio.timeout(timeout):
                return await self._final(job_id, tenant, since_seq, seen)
        except TimeoutError:
            raise AssertionError(f"job {job_id} did not end within {timeout:g} s; "
                                 f"{await self._last_events(job_id, tenant)}") from None

    async def _final(self, job_id: str, tenant: str, since_seq: int, seen: Callable[[Recorded], None] | None) -> Any:
        for attempt in itertools.count():
            try:
                async for r in self.client.events(job_id, tenant, since_seq):
                    since_seq = r.seq
                    if seen is not None:
                        seen(r)
                    if r.type in FINAL_JOB_EVENTS:
                        return r.event
            except TRANSIENT as err:  # a 503 comes at once: back off (0.1 s doubling, at most 2 s)
                print(f"[harness] waiting for job {job_id}: the stream did not answer ({type(err).__name__}); "
                      f"subscribing again (try {attempt + 2})")
                await asyncio.sleep(min(2.0, 0.1 * 2**attempt))
            except ConnectionClosedError:  # given up by nats-py (a reload's auth check: docs/security.md)
                print(f"[harness] waiting for job {job_id}: the connection was closed for good; connecting again")
                self.nc = None
                await self._connect()
        raise AssertionError("unreachable")

    async def _last_events(self, job_id: str, tenant: str, n: int = 15) -> str:
        """The job's last `n` events as the log has them now, one line each (or why they could
        not be read), and the processes the supervisor restarted or gave up on."""
        try:
            async with asyncio.timeout(15):
                if self.nc is None or self.nc.is_closed:
                    self.nc = None
                    await self._connect()
                # Its layout's request and answer too: a job stalled before its plan has
                # nothing else past its JobRequested (the soak's stall of session 37).
                events = await EventStore(self.conn).read_many([*subjects.job_filters(tenant, job_id),
                                                                subjects.layout_events(tenant, job_id)])
        except Exception as err:  # noqa: BLE001 - a diagnosis, not the test's verdict
            return f"its events could not be read ({err!r})"
        try:
            async with asyncio.timeout(15):
                consumers = await self._layout_consumers()
        except Exception as err:  # noqa: BLE001 - as above
            consumers = f"  the layout consumers could not be read ({err!r})"
        lines = [f"  #{r.seq} {r.time:%H:%M:%S.%f} {r.type} {_brief(r.event)}" for r in events[-n:]]
        given_up = "".join(f"\n  given up: {m}" for m in self.deployment.given_up.values())
        cluster = next((str(getattr(r.event, "cluster_id", "")) for r in events if getattr(r.event, "cluster_id", "")), "")
        return (f"{len(events)} events in the log, the last {len(lines)}:\n" + "\n".join(lines) + given_up
                + "\n" + consumers
                + "\n" + planners_on(self.deployment.data_dir / "logs", [job_id, cluster] if cluster else [job_id]))

    async def _layout_consumers(self) -> str:
        """Where the solvers' and each planner's layout consumers stand (delivered, acked,
        pending, redelivered): which of them a layout's request or answer did not reach."""
        js = self.conn.jsm()
        stream = await js.find_stream_name_by_subject(subjects.ALL_LAYOUT_EVENTS)
        out = []
        for info in await js.consumers_info(stream):
            if info.name is None or not (info.name == "solvers" or info.name.startswith("planner-layouts")):
                continue
            out.append(f"  consumer {info.name}: delivered {info.delivered and info.delivered.stream_seq}, "
                       f"ack floor {info.ack_floor and info.ack_floor.stream_seq}, pending {info.num_pending}, "
                       f"ack pending {info.num_ack_pending}, redelivered {info.num_redelivered}")
        return "\n".join(out) or "  (no layout consumers)"

    # -- after -------------------------------------------------------------------------------

    async def check(self, *, planner_running: bool = True, history: History | None = None) -> Report:
        assert self.nc is not None
        report = await check(self.nc, tracker_url=self.deployment.tracker_url if self._tracker_up() else None,
                             planner_running=planner_running, tracker_ssl=http_ssl(self.base), client_history=history)
        print(f"\n[invariants] {report.summary()}")
        for line in report.ended_in_flight + report.timed_out:
            print(f"[invariants]   {line}")
        return report

    def tracker_urls(self) -> list[str]:
        """Where each tracker process answers (its last `--port`)."""
        return [f"http://{self._host_of(name)}:{_option(self.deployment.commands()[name], '--port')}"
                for name in self.deployment.processes("tracker")]

    def _host_of(self, name: str) -> str:
        return "127.0.0.1"

    def _tracker_up(self) -> bool:
        """The tracker on `deployment.tracker_url` runs (the first of several, `tracker-1`)."""
        return any(c.name in ("tracker", "tracker-1") for c in self.deployment.children)


def _brief(event: Any) -> str:
    """An event's fields that say where a job is (task, attempt, who, why)."""
    fields = ("task_id", "attempt", "provisioner", "state", "error", "reason")
    return " ".join(f"{f}={getattr(event, f)}" for f in fields if getattr(event, f, None) not in (None, ""))


def _option(args: list[str], name: str) -> str:
    """The last value given to an option."""
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a == name][-1]


SHARD_WORDS = ("resumed", "handed over", "shards", "lease", "adopted", "take the log's view", "lost a race")


def planners_on(folder: Path, ids: list[str], most: int = 80) -> str:
    """Each planner's and solver's lines naming the job or its cluster, and the planners' lines on shards and
    resumes: who acted for a job that stalled, and when shards moved (a stall after a
    partition is seen once in many runs, and only these lines say which planner held it)."""
    out = []
    for path in sorted([*folder.glob("planner*.log"), *folder.glob("solver*.log")]):
        text = path.read_text(errors="replace").splitlines()
        said = [line for line in text if any(i in line for i in ids if i) or any(w in line for w in SHARD_WORDS)]
        out.append(f"--- {path.name}: {len(said)} lines on the job, its cluster, shards and resumes ---")
        out += [line[:400] for line in said[-most:]]
    return "\n".join(out)


def service_log_tails(folder: Path, lines: int = 8) -> str:
    """Each service's warnings and errors and its last lines: on a CI machine the test's
    folder is gone once the run ends, and a flaky failure is seen only once."""
    out = []
    for path in sorted(folder.glob("*.log")):
        text = path.read_text(errors="replace").splitlines()
        loud = [line for line in text if '"level": "warning"' in line or '"level": "error"' in line]
        tail = [line for line in text[-lines:] if line not in loud[-lines:]]
        out.append(f"--- {path.name} ({len(text)} lines, {len(loud)} warnings/errors) ---")
        out += [line[:400] for line in loud[-lines:] + tail]
    return "\n".join(out)

