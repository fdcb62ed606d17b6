"""The auth service gives the buckets made short their replicas, on a real cluster of three
nats-servers with authorization on (muster/bus/replicas.py): one there at its start, and one
made with one replica while it runs (its creation's advisory). Each is seen moved by the
server's advisory of the stream's update, waited for with a deadline."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import structlog
from nats.aio.msg import Msg
from nats.js.api import KeyValueConfig, StorageType

from muster.bus.cluster import start_loopback_cluster
from muster.bus.connect import connect, read_credentials_file
from muster.bus.replicas import kv_stream
from muster.bus.wire import flush
from services.auth.bootstrap import Bootstrap, BootstrapPrincipal
from services.auth.keys import LOG_USER, AuthKeys, server_auth_config
from services.auth.service import AuthService
from services.provisioner.presence import presence_bucket

from .clusters import retried

pytestmark = pytest.mark.nats

UPDATED = "$JS.EVENT.ADVISORY.STREAM.UPDATED."


async def test_the_auth_service_gives_short_buckets_the_deployments_replicas(tmp_path: Path) -> None:
    keys = AuthKeys.load_or_create(tmp_path / "auth")
    nodes, url = await start_loopback_cluster(tmp_path / "nats", auth=server_auth_config(keys.issuer_public, keys.bus_secret))
    try:
        nc = await connect(url, name="older-version", user=LOG_USER, password=keys.bus_secret, token=None)
        js = nc.jetstream()
        updated: dict[str, asyncio.Future[None]] = {b: asyncio.get_running_loop().create_future() for b in ("spend", "leases")}

        async def on_update(msg: Msg) -> None:
            bucket = msg.subject.rsplit(".", 1)[1].removeprefix("KV_")
            if bucket in updated and not updated[bucket].done():
                updated[bucket].set_result(None)

        await nc.subscribe(UPDATED + "*", cb=on_update)
        await retried(lambda: js.create_key_value(KeyValueConfig(bucket="spend", history=1, storage=StorageType.FILE)))
        auth = AuthService(url, keys, replicas=3)
        await auth.start()
        try:
            await asyncio.wait_for(updated["spend"], 20)
            await js.create_key_value(KeyValueConfig(bucket="leases", history=1, storage=StorageType.FILE, replicas=1))
            await asyncio.wait_for(updated["leases"], 20)
            for bucket in ("spend", "leases"):
                assert (await js.stream_info(kv_stream(bucket))).config.num_replicas == 3, bucket
        finally:
            await auth.stop()
            await nc.close()
    finally:
        for node in nodes:
            await node.stop()


async def test_a_service_finding_a_short_bucket_under_authorization_leaves_it_to_the_auth_service(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A provisioner (its own token, through the callout) starting on a cluster where the
    presence bucket has one replica: its rights do not let it update a stream, so it does not
    ask (the update was refused by nats-server, a permission violation on its connection, and
    waited for 2 s). Its auth service here runs with one replica, so the bucket stays short."""
    monkeypatch.setenv("MUSTER_REPLICAS", "3")
    keys = AuthKeys.load_or_create(tmp_path / "auth")
    nodes, url = await start_loopback_cluster(tmp_path / "nats", auth=server_auth_config(keys.issuer_public, keys.bus_secret))
    spec = Bootstrap(tenants=("default",), principals=(
        BootstrapPrincipal("prov-1", "service", tmp_path / "prov-1.cred", service="provisioner", queues=(("default", "default"),)),
    ), by="test")
    try:
        older = await connect(url, name="older-version", user=LOG_USER, password=keys.bus_secret, token=None)
        await retried(lambda: presence_bucket(older.jetstream(), replicas=1))
        auth = await AuthService(url, keys, bootstrap=spec, replicas=1).start()
        errors: list[str] = []

        async def on_error(err: Exception) -> None:
            errors.append(str(err))

        provisioner = await connect(url, name="provisioner", token=read_credentials_file(tmp_path / "prov-1.cred"),
                                    error_cb=on_error)
        try:
            with structlog.testing.capture_logs() as said:
                kv = await presence_bucket(provisioner.jetstream(), replicas=3)
            # It works as it is (a first write on a fresh cluster: `retried` says why it may be refused 503).
            await retried(lambda: kv.put("provisioner.prov-1", b"{}"))
            await flush(provisioner)
            assert errors == [], errors
            assert [e["stream"] for e in said if e["event"].startswith("a stream has fewer replicas")] == ["KV_presence"], said
            assert (await older.jetstream().stream_info("KV_presence")).config.num_replicas == 1
        finally:
            await provisioner.close()
            await auth.stop()
            await older.close()
    finally:
        for node in nodes:
            await node.stop()
