"""Scenario 4 with TLS, as compose runs it: the 3-node loopback cluster with TLS on the client
ports and the routes (streams replicated 3 times over them), the tracker on HTTPS, every process
verifying; every server's certificate is rotated in the middle of a create, and nothing is lost."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from contracts import subjects
from contracts.commands import Accepted, CreateCluster
from contracts.events import JobSucceeded
from muster.bus.cluster import REPLICAS
from muster.tls.context import http_ssl, served_serial

from .harness import FaultStack, demo_catalog, fault_options, nth

pytestmark = [pytest.mark.fault, pytest.mark.timeout(180)]
T = "default"




async def _route_refuses_a_peer_without_a_certificate(port: int, context: ssl.SSLContext) -> bool:
    """A route port shakes hands in TLS (with a certificate of the CA, for 127.0.0.1), then
    asks the peer for its own and hangs up on one without it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    try:
        await asyncio.wait_for(reader.readline(), 10)
    except ssl.SSLError as err:
        return "CERTIFICATE_REQUIRED" in str(err)
    finally:
        writer.close()
    return False


async def test_a_create_finishes_across_tls_routes_while_every_certificate_rotates(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUSTER_REPLICAS", str(REPLICAS))
    async with await FaultStack.cluster(tmp_path, replicas={}, extra_args=fault_options(tmp_path), tls=True) as fs:
        assert fs.url.count("tls://") == 3
        info = await fs.client.js.stream_info(subjects.EVENTS_STREAM)
        assert info.config.num_replicas == REPLICAS and info.cluster is not None and len(info.cluster.replicas or []) == 2
        context = http_ssl(tmp_path)
        for node in fs.nodes:
            assert node.address is not None
            assert await _route_refuses_a_peer_without_a_certificate(node.address.cluster_port, context)
        servers = [*(n.url for n in fs.nodes), fs.deployment.tracker_url]
        assert fs.deployment.tracker_url.startswith("https://")
        before = [await served_serial(url, context) for url in servers]

        await fs.load_catalog(T, demo_catalog(latency_ms="100-300"))
        replies: list[Accepted] = []
        await fs.when(f"muster.evt.{T}.job.>", nth("TaskCompleted", 3),
                      fs.sending(T, CreateCluster(name="rotated", template="hadoop-small", nodes=3), replies))
        reloaded = await fs.rotate_certificates()  # mid-create
        assert reloaded == ["nats-1", "nats-2", "nats-3", "tracker"]

        final = await fs.wait_final(replies[0].job_id, timeout=120)
        assert isinstance(final, JobSucceeded), final
        # A process whose connection the reloads ended for good is started again (a tracker
        # too, on the same port): probed once each runs.
        await fs.deployment.steady()
        after = [await served_serial(url, context) for url in servers]
        assert all(a != b for a, b in zip(after, before, strict=True)), (before, after)
        # A reload makes nats-server close what the auth callout let in (every connection here:
        # docs/security.md, "TLS"); they came back, re-authenticated, and the job went on.
        report = await fs.check()
        report.assert_ok()
        assert report.jobs == {"succeeded": 1}
