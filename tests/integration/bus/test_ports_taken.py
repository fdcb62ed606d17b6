"""A port chosen as free and taken by another process before the server bound it (`make
test-long` met it: tracker-2 "cannot listen ... the port is in use"): nats-server, alone
or in a loopback cluster, is started again on fresh ports; a tracker given port 0 binds one of
the kernel's and says which, so nothing is chosen before its bind.

Each test takes the port on purpose between the choice and the start: without the retry the
start failed ("did not become ready", or no meta leader within 30 s)."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from muster.bus import cluster, server
from muster.bus.cluster import start_loopback_cluster
from muster.bus.server import NatsServer, start_blocking
from muster.runtime.supervisor import Child, Deployment

pytestmark = pytest.mark.nats


@contextmanager
def a_taken_port() -> Iterator[int]:
    """A port another process (here: this one) listens on."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", server.free_port()))
        taken.listen()
        yield int(taken.getsockname()[1])


def first_then_free(port: int, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """`free_port` gives `port` once (as if it was free when chosen), then free ones; the ports given."""
    real, given = server.free_port, list[int]()

    def choose() -> int:
        given.append(port if not given else real())
        return given[-1]

    monkeypatch.setattr(server, "free_port", choose)
    return given


async def test_a_server_whose_chosen_port_was_taken_starts_on_another(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with a_taken_port() as taken:
        given = first_then_free(taken, monkeypatch)
        async with NatsServer(tmp_path / "nats", name="retried") as nats:
            assert given[0] == taken and nats.port == given[-1] != taken
            assert b"address already in use" in (tmp_path / "nats" / "nats-server.log").read_bytes()
            restarted_on = nats.port
            await nats.stop()
            await nats.start()  # started again: on the port its clients know, not a fresh one
            assert nats.port == restarted_on


def test_a_blocking_start_whose_chosen_port_was_taken_starts_on_another(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    with a_taken_port() as taken:
        given = first_then_free(taken, monkeypatch)
        proc, url = start_blocking(tmp_path / "nats", name="retried")
        try:
            assert given[0] == taken != given[-1] and url == f"nats://127.0.0.1:{given[-1]}"
        finally:
            proc.terminate()
            proc.wait()


def _route_taken_once(port: int, monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """`free_ports` gives the second node's route port as `port` once, then free ones."""
    real, given = server.free_ports, list[list[int]]()

    def choose(n: int) -> list[int]:
        ports = real(n)
        if not given:
            ports[3] = port  # (client, route) per node: nats-2's route port
        given.append(ports)
        return ports

    monkeypatch.setattr(cluster, "free_ports", choose)
    return given


async def test_a_cluster_whose_route_port_was_taken_is_made_again_on_new_ports(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A node says its route port is taken after "Server is ready" and exits: the cluster never
    elected a meta leader, and the start waited out its 30 s."""
    with a_taken_port() as taken:
        given = _route_taken_once(taken, monkeypatch)
        nodes, url = await start_loopback_cluster(tmp_path / "nats")
        try:
            assert len(given) == 2 and taken in given[0] and taken not in given[1]
            assert [n.address.cluster_port for n in nodes if n.address] == given[1][1::2]
            assert url == ",".join(f"nats://127.0.0.1:{p}" for p in given[1][::2])
        finally:
            for n in nodes:
                await n.stop()


def test_free_ports_are_different() -> None:
    assert len(set(server.free_ports(50))) == 50


async def _said(tmp_path: Path, lines: list[str]) -> Child:
    """A child that says `lines` on stderr (a service's log) and exits, read as `Deployment` reads one."""
    code = f"import sys; sys.stderr.write({''.join(line + chr(10) for line in lines)!r})"
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", code, stderr=asyncio.subprocess.PIPE)
    child = Child("tracker-2", process, tmp_path / "tracker-2.log")
    await asyncio.wait_for(Deployment(tmp_path)._copy(child, asyncio.get_running_loop().create_future()), 30)
    await process.wait()
    return child


@pytest.mark.parametrize(("url", "port"), [("http://127.0.0.1:43117", 43117), ("https://:::43118", 43118), ("nowhere", 0)])
async def test_a_tracker_given_port_0_is_known_by_the_port_it_says(tmp_path: Path, url: str, port: int) -> None:
    child = await _said(tmp_path, [f'{{"event": "listening", "url": "{url}"}}', '{"event": "started"}'])
    assert child.port == port


def test_a_tracker_keeps_the_port_it_got_at_its_restarts(tmp_path: Path) -> None:
    deployment = Deployment(tmp_path, replicas={"tracker": 2})

    def last_port(name: str) -> str:  # (click keeps the last value given)
        args = deployment.commands()[name]
        return [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--port"][-1]

    assert last_port("tracker-1") == last_port("tracker-2") == "0"  # no port chosen before the bind
    deployment.bound_ports["tracker-2"] = 43119
    assert (last_port("tracker-1"), last_port("tracker-2")) == ("0", "43119")
