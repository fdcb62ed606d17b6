"""The fault harness's deployment with a network between its parts: every nats-server and every
service process in a network namespace of its own (`netns.Network`), linked by a bridge, so the
nemesis (`nemesis.Nemesis`) can cut, split, flap, lose and slow the links between them.

    async with await NetStack.start(tmp_path, replicas=SERVICE_REPLICAS, extra_args=...,
                                    nats_nodes=3, proxied=True) as fs:
        await fs.nemesis.isolate("planner-2")
        ...
        await fs.nemesis.heal()

It is `FaultStack` otherwise (kill -9, restart, `check`...). A node's nats-server listens on its
own address (4222, routes 6222: each namespace has its own ports); with `proxied`, the routes
between the nodes go through the delay proxy (each node advertises its proxy address), so
latency can be added between NATS nodes. The harness and its client stay in the host namespace
and reach everything through the bridge.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from muster.bus.cluster import CLIENT_PORT, CLUSTER_PORT, NODES, ClusterNode, NodeAddress, render_node_config
from muster.bus.server import NatsServer
from muster.runtime.supervisor import Deployment
from muster.tls.context import INSECURE_ENV
from services.auth.keys import AuthKeys, server_auth_config

from .harness import START_TIMEOUT_S, FaultStack
from .nemesis import DelayProxy, Nemesis
from .netns import Network


@dataclass
class NsNode(ClusterNode):
    """A cluster node in its own namespace: listens on all of its (one) interface."""

    advertise: str = ""

    def config_text(self) -> str:
        assert self.address is not None
        self.port = self.address.client_port
        return render_node_config(self.address, self.peers, str(self.data_dir / "jetstream"), "0.0.0.0", auth=self.auth,
                                  advertise=self.advertise)


@dataclass
class NetStack(FaultStack):
    net: Network | None = None
    nemesis: Nemesis = field(init=False)
    insecure_before: str | None = None

    @classmethod
    async def start(cls, base: Path, *, replicas: dict[str, int], extra_args: dict[str, list[str]],
                    tenants: str = "default", capacity: int = 8, nats_nodes: int = 3, proxied: bool = False) -> NetStack:
        """`nats_nodes`: 1 (one server) or 3 (a cluster; the caller sets MUSTER_REPLICAS)."""
        # Plain TCP off loopback, but only on the addresses of this test's own namespaces: told
        # so, as `muster up --insecure-network` would be (the servers, the tracker; until `stop`).
        previous = os.environ.get(INSECURE_ENV)
        os.environ[INSECURE_ENV] = "1"
        net = await Network.open()
        nemesis = Nemesis(net, await DelayProxy().start() if proxied else None)
        stack: NetStack | None = None
        try:
            keys = AuthKeys.load_or_create(base / "auth")
            auth = server_auth_config(keys.issuer_public, keys.bus_secret)
            nodes: list[ClusterNode] = []
            server: NatsServer | None = None
            if nats_nodes == 1:
                node = await net.add("nats")
                server = NatsServer(base / "nats", port=CLIENT_PORT, name="nats", auth=auth, host=node.ip,
                                    launcher=tuple(net.launcher("nats")))
                await server.start()
                url = server.url
            else:
                nodes = await _cluster(base, net, nemesis, auth, proxied)
                from muster.bus.cluster import start_cluster

                url = await start_cluster(nodes)
            args = {name: list(a) for name, a in extra_args.items()}
            args["tracker"] = [*args.get("tracker", []), "--host", "0.0.0.0"]  # its own namespace's interface
            deployment = Deployment(base / "deploy", nats_url=url, capacity=capacity, tenants=tenants, replicas=replicas,
                                    extra_args=args, auth_dir=base / "auth", launcher=net.launcher,
                                    start_timeout_s=START_TIMEOUT_S)
            for name in deployment.commands():
                await net.add(name)
            deployment.tracker_host = net.nodes[deployment.processes("tracker")[0]].ip
            stack = cls(base, deployment, server=server, nodes=nodes, net=net)
            stack.insecure_before = previous
            stack.nemesis = nemesis
            await deployment.start_auth()
            await stack._create_streams(int(os.environ.get("MUSTER_REPLICAS", "1")))
            await stack._start()
            return stack
        except BaseException:
            if stack is not None:
                await stack.stop()
            else:
                await nemesis.close()
                await net.close()
                _restore(previous)
            raise

    async def __aenter__(self) -> NetStack:
        return self

    async def stop(self) -> None:
        try:
            await self.nemesis.heal()  # links up and rules gone, so that every process stops cleanly
        finally:
            await super().stop()
            await self.nemesis.close()
            if self.net is not None:
                await self.net.close()
            _restore(self.insecure_before)

    def _host_of(self, name: str) -> str:
        assert self.net is not None
        return self.net.nodes[name].ip

    def nodes_names(self) -> list[str]:
        """The NATS nodes' names (their namespaces'), as `kill_server` counts them."""
        return [n.name for n in self.nodes] if self.nodes else ["nats"]


async def _cluster(base: Path, net: Network, nemesis: Nemesis, auth: str, proxied: bool) -> list[ClusterNode]:
    for name in NODES:
        await net.add(name)
    reach = {name: (await nemesis.proxy_for(name, CLUSTER_PORT)) if proxied else net.nodes[name].ip for name in NODES}
    peers = [NodeAddress(name, reach[name], CLIENT_PORT, CLUSTER_PORT, None) for name in NODES]
    return [NsNode(base / "nats" / name, name=name, auth=auth, host=net.nodes[name].ip, launcher=tuple(net.launcher(name)),
                   peers=peers, address=NodeAddress(name, net.nodes[name].ip, CLIENT_PORT, CLUSTER_PORT, None),
                   advertise=f"{reach[name]}:{CLUSTER_PORT}" if proxied else "")
            for name in NODES]


def _restore(previous: str | None) -> None:
    if previous is None:
        os.environ.pop(INSECURE_ENV, None)
    else:
        os.environ[INSECURE_ENV] = previous
