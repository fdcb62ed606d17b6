"""A follower that lags, on a real cluster of three nats-servers (decision 0057's confirmation
with the leader, muster/bus/scopedlog.py): every route between the follower and the two others
goes through a proxy (tests/fault/delayproxy.py, in this process) that holds each chunk back
while the test says so, so a write is acknowledged by the two others' quorum before the
follower has it, while the follower itself goes on answering its clients at once.

A reader connected to that follower, governance's scoped store (its probe on a subject of its
own): its read unconfirmed, answered by the follower's replica (the direct get of the subject's
last event), lacks the acknowledged write, so the test shows a lag, not only the confirmation's
path (test_scopedlog_cluster.py stops the follower with SIGSTOP, and it had applied each write
by the time it was read); its read confirmed with the leader, started at the same moment, has it. The lag is not met in every round (the follower sometimes stops answering direct gets
itself, and they go to the leader), so rounds go on until one shows it, `ROUNDS` at most.

Every route is explicit and through its proxy; each node advertises an address nothing listens
on, so no route is made past the proxies from what the nodes tell one another."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from contracts import subjects
from contracts.events import ClusterRequested
from contracts.records import Append
from muster.bus.cluster import NODES, ClusterNode, NodeAddress, render_node_config, start_cluster
from muster.bus.connect import connect
from muster.bus.eventstore import EventStore
from muster.bus.scopedlog import ScopedEventStore
from muster.bus.server import PORT_ATTEMPTS, PortInUse, free_ports
from muster.bus.streams import ensure_streams
from tests.fault.delayproxy import Proxy

from .clusters import retried

pytestmark = pytest.mark.nats

LAG_S = 0.3
"""How long the follower's routes hold each chunk back while it lags: far over a read's round
trip, and short enough that the follower still takes itself for current. With 1 s it often did
not: it stopped answering direct gets itself (they went to the leader, over the slow routes),
so a round showed no lag; with 0.3 s the direct get it answered lacked the write in 5 of 8."""
ROUNDS = 12
"""Rounds until one shows the lag (each is read confirmed, and must be right)."""
NOWHERE = "127.0.0.1:1"


@dataclass
class ProxiedNode(ClusterNode):
    """A node whose route to each peer is that pair's proxy, advertising NOWHERE."""

    routes: list[NodeAddress] = field(default_factory=list)

    def config_text(self) -> str:
        assert self.address is not None
        self.port = self.address.client_port
        return render_node_config(self.address, self.routes, str(self.data_dir / "jetstream"), "127.0.0.1", advertise=NOWHERE)


async def _proxied_cluster(base: Path, proxy: Proxy) -> tuple[list[ProxiedNode], dict[tuple[str, str], str]]:
    """Three nodes; each ordered pair's route through a proxy on a loopback address of its own
    (127.0.0.1x: the proxy tells its links apart by the address they came to). Returns the
    nodes and each pair's proxy address."""
    ports = free_ports(2 * len(NODES))
    addresses = {name: NodeAddress(name, "127.0.0.1", ports[2 * i], ports[2 * i + 1], None) for i, name in enumerate(NODES)}
    hosts: dict[tuple[str, str], str] = {}
    routes: dict[str, list[NodeAddress]] = {name: [] for name in NODES}
    for i, (a, b) in enumerate((a, b) for a in NODES for b in NODES if a != b):
        host = f"127.0.0.{11 + i}"
        await proxy.listen(host, 0, "127.0.0.1", addresses[b].cluster_port)
        port = proxy.servers[-1].sockets[0].getsockname()[1]
        hosts[(a, b)] = host
        routes[a].append(NodeAddress(b, host, addresses[b].client_port, port, None))
    nodes = [ProxiedNode(base / name, name=name, address=addresses[name], peers=list(addresses.values()), routes=routes[name])
             for name in NODES]
    return nodes, hosts


async def _started_proxied_cluster(base: Path, proxy: Proxy) -> tuple[list[ProxiedNode], dict[tuple[str, str], str]]:
    """`_proxied_cluster`, started. Its ports are chosen before any node starts (each node's routes
    name its peers'), so one another process took before its node bound it means a new cluster
    on new ports (in a directory of its own), as `start_loopback_cluster` does."""
    for attempt in range(1, PORT_ATTEMPTS + 1):
        nodes, hosts = await _proxied_cluster(base / f"try-{attempt}", proxy)
        try:
            await start_cluster(list(nodes))  # (every node stopped when it raises)
            return nodes, hosts
        except PortInUse:
            if attempt == PORT_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def _requested(name: str) -> Append:
    return Append(ClusterRequested(tenant="acme", cluster_id=name, name=name, template="t", provider="p", job_id="j"),
                  msg_id=f"requested/{name}")


async def _stream_leader_not(nc: object, node: str, tries: int = 6) -> str:
    """The log's leader, moved off `node` if it is there (a step-down elects another)."""
    from nats.aio.client import Client

    assert isinstance(nc, Client)
    for _ in range(tries):
        info = await nc.jetstream().stream_info(subjects.EVENTS_STREAM)
        assert info.cluster is not None
        if info.cluster.leader and info.cluster.leader != node:
            return info.cluster.leader
        await nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{subjects.EVENTS_STREAM}", b"", timeout=10)
        await asyncio.sleep(0.5)  # a bounded retry while the new leader is elected
    raise AssertionError(f"the log's leader stayed on {node}")


async def test_a_read_through_a_lagging_follower_misses_the_write_unconfirmed_and_has_it_confirmed(tmp_path: Path) -> None:
    proxy = Proxy()
    nodes, hosts = await _started_proxied_cluster(tmp_path / "nats", proxy)
    follower = nodes[-1]
    try:
        writer = await connect(",".join(n.url for n in nodes if n is not follower), name="writer")
        reader = await connect(follower.url, name="reader", max_reconnect_attempts=0)
        try:
            await retried(lambda: ensure_streams(writer.jetstream(), replicas=3))
            await _stream_leader_not(writer, follower.name)
            store = EventStore(writer)
            scoped = ScopedEventStore(reader, confirm=(subjects.ALL_GOVERNANCE_EVENTS,), deletes=False)
            unconfirmed = ScopedEventStore(reader, confirm=False, deletes=False)
            warm = subjects.cluster_events("acme", "c-warm")
            # (its leader just moved: the server this writer is on may not know where it takes
            # writes yet, a 503 no responders, until its interest came through the routes)
            [first] = await retried(lambda: store.append(warm, [_requested("c-warm")]))
            assert [r.seq for r in await scoped.read(warm)] == [first]
            stale = 0
            for i in range(ROUNDS):
                cluster = subjects.cluster_events("acme", f"c-{i}")
                for (a, b), host in hosts.items():
                    if follower.name in (a, b):
                        proxy.delays[("127.0.0.1", host)] = LAG_S
                [made] = await store.append(cluster, [_requested(f"c-{i}")])
                # Both at the same moment, on the same connection to the follower: unconfirmed, its
                # replica answers the direct get of the subject's last event.
                plain, confirmed = await asyncio.gather(unconfirmed.read(cluster), scoped.read(cluster))
                stale += [r.seq for r in plain] != [made]
                assert [r.seq for r in confirmed] == [made], i
                proxy.delays.clear()
                if stale:
                    break
            assert stale, f"the follower had the write in each of {ROUNDS} rounds: no lag was made"
        finally:
            await reader.close()
            await writer.close()
    finally:
        proxy.delays.clear()
        for n in nodes:
            await n.stop()
        for server in proxy.servers:
            server.close()
        # each link's handler ends once both of its ends closed (the nodes are stopped)
        links = [t for t in asyncio.all_tasks() if "accept" in t.get_coro().__qualname__]  # type: ignore[union-attr]
        await asyncio.wait_for(asyncio.gather(*links, return_exceptions=True), 10)
