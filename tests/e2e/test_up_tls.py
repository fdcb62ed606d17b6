"""`muster up --mtls` as a user starts it: TLS on every hop, every client presenting a certificate
of the local CA, and the server certificates rotated in the middle of a create."""

from __future__ import annotations

import asyncio
import os
import signal
import ssl
import stat
import sys
from pathlib import Path

import aiohttp
import pytest
from nats.aio.msg import Msg

from contracts.commands import Accepted, CreateCluster
from contracts.events import JobSucceeded
from muster.bus.connect import bearer_headers, connect, read_credentials_file
from muster.client import MusterClient
from muster.tls.ca import serial_of
from muster.tls.context import CA_ENV, TlsRefused, http_ssl

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

DEMO = Path(__file__).parents[2] / "muster" / "demo" / "catalog"


async def _line(stream: asyncio.StreamReader, marker: str, seen: dict[str, str]) -> str:
    while True:
        line = (await stream.readline()).decode()
        if not line:
            raise AssertionError(f"muster up exited before {marker!r}; saw {seen}")
        key, _, value = line.partition(":")
        seen[key.strip()] = value.strip()
        if marker in line:
            return line


async def _served_serial(url: str, context: ssl.SSLContext) -> int:
    host, port = url.split("://")[1].split(":")
    _, writer = await asyncio.open_connection(host, int(port), ssl=context)
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    return serial_of(der)


async def _cli(tmp_path: Path, *args: str) -> tuple[int, str]:
    """A command from another shell, after `export MUSTER_DATA_DIR=...` as `muster up` says."""
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "MUSTER_TOKEN", CA_ENV)}
    env["MUSTER_DATA_DIR"] = str(tmp_path / "data")
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "muster", *args,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env,
                                                cwd=tmp_path)
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_up_with_mutual_tls_rotates_its_certificates_mid_create(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "MUSTER_TOKEN", "MUSTER_AUTH_SYSTEM_TOKEN", CA_ENV)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "muster", "up", "--mtls", "--data-dir", str(tmp_path / "data"), "--tracker-port", "0",
        "--catalog", str(DEMO), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env, cwd=tmp_path)
    assert proc.stdout is not None
    seen: dict[str, str] = {}
    try:
        await asyncio.wait_for(_line(proc.stdout, "muster is up", seen), 90)
        nats_url, tracker = seen["nats"], seen["tracker"]
        assert nats_url.startswith("tls://127.0.0.1:") and tracker.startswith("https://127.0.0.1:")
        data = tmp_path / "data"
        files = [p for p in (data / "tls").rglob("*") if p.is_file()]
        assert {"ca.pem", "ca.key", "nats.pem", "tracker.key", "client.pem", "planner.pem", "provisioner.key"} <= {p.name for p in files}
        assert {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o600}

        # The CLI verifies and presents the local user's certificate (found in the data dir).
        code, out = await _cli(tmp_path, "whoami")
        assert code == 0 and "super admin" in out, out
        # A client that trusts the CA but has no certificate of its own is refused.
        monkeypatch.setenv(CA_ENV, str(data / "tls" / "ca.pem"))
        monkeypatch.chdir(tmp_path / "data")  # no ./.muster/tls/client.pem here
        with pytest.raises(TlsRefused, match="(?i)certificate"):
            await asyncio.wait_for(connect(nats_url, name="no-client-cert", token=read_credentials_file(data / "credentials")), 30)
        monkeypatch.delenv(CA_ENV)

        context = http_ssl(data)
        before = (await _served_serial(nats_url, context), await _served_serial(tracker, context))
        token = read_credentials_file(data / "credentials")
        async with await MusterClient.connect(nats_url, token=token, data_dir=data) as client:
            completed = asyncio.get_running_loop().create_future()

            async def on_task_event(msg: Msg) -> None:
                if msg.headers and msg.headers.get("Muster-Type") == "TaskSucceeded" and not completed.done():
                    completed.set_result(None)

            sub = await client.nc.subscribe("muster.evt.default.task.>", cb=on_task_event)
            reply = await client.send("default", CreateCluster(name="rotated", template="hadoop-small", nodes=3))
            assert isinstance(reply, Accepted)
            await asyncio.wait_for(completed, 60)  # mid-create: a task done, most still to come
            await sub.unsubscribe()
            code, out = await _cli(tmp_path, "tls", "rotate")
            assert code == 0 and f"pid {proc.pid}" in out, out
            said = await asyncio.wait_for(_line(proc.stdout, "certificates", seen), 60)
            assert "certificates rotated" in said and "nats-server" in said and "tracker" in said, said
            assert isinstance(await client.wait(reply.job_id, timeout=120), JobSucceeded)
        after = (await _served_serial(nats_url, context), await _served_serial(tracker, context))
        assert after[0] != before[0] and after[1] != before[1]

        async with aiohttp.ClientSession() as http:
            async with http.get(f"{tracker}/v1/jobs/{reply.job_id}", headers=bearer_headers(token), ssl=context) as resp:
                body = await resp.json()
        assert resp.status == 200 and body["state"] == "succeeded"
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()
    assert proc.returncode == 0
