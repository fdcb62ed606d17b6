"""Real TLS between muster's clients and nats-server: verified, never in clear, rotated in place."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import trustme
from nats.aio.msg import Msg

from muster.bus.connect import connect
from muster.bus.server import NatsServer, free_port
from muster.cli_bus import connect_or_fail
from muster.cli_support import CliError
from muster.tls.ca import LocalCA
from muster.tls.context import CA_ENV, CERT_ENV, KEY_ENV, TlsError, TlsRefused, client_context, client_tls, served_serial
from muster.tls.natsconf import ServerTls

from .conftest import StartTls

pytestmark = pytest.mark.nats


async def _round_trip(url: str) -> bytes:
    nc = await connect(url, name="tls-test")

    async def echo(msg: Msg) -> None:
        await msg.respond(msg.data)

    try:
        sub = await nc.subscribe("tls.echo", cb=echo)
        answer = await nc.request("tls.echo", b"over tls", timeout=5)
        await sub.unsubscribe()
        return answer.data
    finally:
        await nc.close()




async def test_a_client_that_trusts_the_ca_talks_over_tls(tls_server: StartTls, ca: LocalCA, monkeypatch: pytest.MonkeyPatch) -> None:
    url = tls_server()
    assert url.startswith("tls://127.0.0.1:")
    monkeypatch.setenv(CA_ENV, str(ca.cert_path))
    assert await _round_trip(url) == b"over tls"


async def test_a_client_without_the_ca_is_refused_at_once(tls_server: StartTls, ca: LocalCA, monkeypatch: pytest.MonkeyPatch) -> None:
    url = tls_server()
    with pytest.raises(TlsRefused, match="unable to get local issuer certificate.*the system's trusted roots"):
        await asyncio.wait_for(connect(url, name="no-ca"), 15)
    foreign = trustme.CA()  # another CA altogether
    with foreign.cert_pem.tempfile() as other:
        monkeypatch.setenv(CA_ENV, other)
        with pytest.raises(TlsRefused, match=f"unable to get local issuer certificate.*{other}"):
            await asyncio.wait_for(connect(url, name="other-ca"), 15)


async def test_a_certificate_for_another_host_is_refused(tls_server: StartTls, ca: LocalCA, monkeypatch: pytest.MonkeyPatch) -> None:
    url = tls_server(hosts=("nats.example", "10.9.8.7"), name="elsewhere")
    monkeypatch.setenv(CA_ENV, str(ca.cert_path))
    with pytest.raises(TlsRefused, match="IP address mismatch"):
        await asyncio.wait_for(connect(url, name="wrong-host"), 15)


async def test_nothing_crosses_in_clear_not_even_the_server_info(tls_server: StartTls) -> None:
    url = urlsplit(tls_server())
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    writer.write(b'CONNECT {"auth_token":"mst_x_y_secret"}\r\nPING\r\n')
    await writer.drain()
    said = await asyncio.wait_for(reader.read(), 15)  # the server hangs up on a client that does not start with TLS
    writer.close()
    assert b"INFO" not in said and b"PONG" not in said


async def test_plain_tcp_to_another_host_is_refused_before_any_byte_is_sent() -> None:
    with pytest.raises(TlsError, match="refusing to send credentials in clear to nats.example"):
        await connect("nats://nats.example:4222", name="plain-remote")


async def test_mutual_tls_refuses_a_client_without_a_certificate_of_the_ca(
        tls_server: StartTls, ca: LocalCA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = tls_server(verify_clients=True)
    monkeypatch.setenv(CA_ENV, str(ca.cert_path))
    # Each refusal says it is this client's certificate the server refused, and why: not the CA
    # this client trusts, which OpenSSL's alert names alone led to.
    with pytest.raises(TlsRefused, match=r"asks for a client certificate \(mutual TLS\) and this client showed none.*"
                                         f"\\${CERT_ENV}") as none:
        await asyncio.wait_for(connect(url, name="no-client-cert"), 15)
    assert "this client trusts" not in str(none.value)
    foreign = trustme.CA().issue_cert("planner")
    with foreign.private_key_pem.tempfile() as key, foreign.cert_chain_pems[0].tempfile() as cert:
        monkeypatch.setenv(CERT_ENV, cert)
        monkeypatch.setenv(KEY_ENV, key)
        with pytest.raises(TlsRefused, match=f"does not trust this client's certificate {cert}: it is not of the server's CA"):
            await asyncio.wait_for(connect(url, name="foreign-client-cert"), 15)
    ended = ca.issue(tmp_path / "tls" / "clients" / "ended", "muster ended", server=False, days=-0.001)
    monkeypatch.setenv(CERT_ENV, str(ended.cert))
    monkeypatch.setenv(KEY_ENV, str(ended.key))
    with pytest.raises(TlsRefused, match=f"refused this client's certificate {ended.cert}: it has ended"):
        await asyncio.wait_for(connect(url, name="ended-client-cert"), 15)
    own = ca.issue(tmp_path / "tls" / "clients" / "planner", "muster planner", server=False)
    monkeypatch.setenv(CERT_ENV, str(own.cert))
    monkeypatch.setenv(KEY_ENV, str(own.key))
    assert await _round_trip(url) == b"over tls"


async def test_rotated_certificates_are_served_after_a_reload_and_open_connections_stay(
        tmp_path: Path, ca: LocalCA, monkeypatch: pytest.MonkeyPatch) -> None:
    pair = ca.issue(tmp_path / "tls" / "servers" / "nats", "muster nats", ["127.0.0.1"])
    server = NatsServer(tmp_path / "nats", tls=ServerTls(str(pair.cert), str(pair.key), str(ca.cert_path)))
    monkeypatch.setenv(CA_ENV, str(ca.cert_path))
    context = client_context(client_tls())
    async with server:
        nc = await connect(server.url, name="stays")
        before = await served_serial(server.url, context)
        ca.issue(tmp_path / "tls" / "servers" / "nats", "muster nats", ["127.0.0.1"])
        await server.reload()
        assert await served_serial(server.url, context) != before
        assert (await nc.request("$JS.API.INFO", b"", timeout=5)).data  # the open connection goes on
        assert nc.is_connected and nc.stats["reconnects"] == 0
        await nc.close()


def test_a_plain_server_is_refused_beyond_loopback(tmp_path: Path) -> None:
    from muster.bus.server import render_config

    with pytest.raises(TlsError, match="refusing to listen on 0.0.0.0 without TLS"):
        render_config(free_port(), tmp_path, "n", host="0.0.0.0")


async def test_a_service_whose_connection_is_closed_for_good_exits_to_be_started_again(tmp_path: Path) -> None:
    """A reload can end a connection with an "Authorization Violation" (here: the server's token
    changed), and nats-py then gives the connection up for good: the service must not live on
    without it, or its supervisor never starts it again."""
    token = "mst_solver_0123456789ab_" + "0" * 64
    server = NatsServer(tmp_path / "nats", auth=f'authorization {{ token: "{token}" }}')
    async with server:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "muster", "solver", "--nats-url", server.url, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "MUSTER_TOKEN": token, "MUSTER_LOG_LEVEL": "INFO"})
        assert proc.stderr is not None
        try:
            while b'"started"' not in (line := await asyncio.wait_for(proc.stderr.readline(), 60)):
                assert line, "the solver exited before it started"
            server.auth = 'authorization { token: "mst_other_0123456789ab_' + "1" * 64 + '" }'
            (tmp_path / "nats" / "nats.conf").write_text(server.config_text())
            await server.reload()
            said = (await asyncio.wait_for(proc.stderr.read(), 30)).decode()
            assert await proc.wait() == 1
            assert "closed for good" in said and "authorization" in said and "Traceback" not in said, said
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_the_cli_says_tls_only_of_a_server_that_speaks_it(tls_server: StartTls, ca: LocalCA, monkeypatch: pytest.MonkeyPatch,
                                                                 closed_port: int) -> None:
    monkeypatch.setenv(CA_ENV, str(ca.cert_path))
    plain = tls_server().replace("tls://", "nats://")
    with pytest.raises(CliError) as answered:
        await asyncio.wait_for(connect_or_fail(plain), 30)
    assert f"NATS at {plain} wants TLS" in str(answered.value), answered.value
    assert f"give its URL as {plain.replace('nats://', 'tls://')}" in str(answered.value), answered.value
    nobody = f"nats://127.0.0.1:{closed_port}"
    with pytest.raises(CliError) as down:
        await asyncio.wait_for(connect_or_fail(nobody), 30)
    assert f"cannot reach NATS at {nobody} (nothing listens there: connection refused)" in str(down.value), down.value
    assert "tls://" not in str(down.value), down.value


async def test_a_plain_url_to_a_tls_server_is_said_without_waiting_out_every_try(
        tls_server: StartTls, ca: LocalCA, monkeypatch: pytest.MonkeyPatch) -> None:
    """`muster cluster create --nats-url nats://...` to a TLS-first server waited out nats-py's 4
    tries of 2 s each (the server says nothing to a plain client) before saying that a TLS
    server needs a tls:// URL. Counted at a relay in front of the server: the command's first
    try and the one question whether the server speaks TLS, not 4 tries."""
    monkeypatch.setenv(CA_ENV, str(ca.cert_path))
    target = urlsplit(tls_server())
    accepted: list[asyncio.Task[None]] = []

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(target.hostname, target.port)
        accepted.append(asyncio.ensure_future(pipe(up_reader, writer)))
        await pipe(reader, up_writer)

    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    url = f"nats://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        with pytest.raises(CliError, match=f"wants TLS.*give its URL as tls://127.0.0.1:{url.rsplit(':', 1)[1]}"):
            await asyncio.wait_for(connect_or_fail(url), 30)
        assert len(accepted) < 4, f"{len(accepted)} connections: nats-py's every try was waited out"
    finally:
        server.close()
        for task in accepted:
            task.cancel()
        await server.wait_closed()


async def test_a_service_given_a_plain_url_to_a_tls_server_says_to_give_tls(tls_server: StartTls, ca: LocalCA) -> None:
    """A service retries a server it cannot talk to, and logs each failure: to a server that
    wants TLS first, nats-py's own words ("empty response from server when expecting INFO
    message") did not say that the URL was the thing to fix."""
    plain = tls_server().replace("tls://", "nats://")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "muster", "solver", "--nats-url", plain, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, CA_ENV: str(ca.cert_path), "MUSTER_TOKEN": "mst_solver_0123456789ab_" + "0" * 64})
    assert proc.stderr is not None
    try:
        while b'"nats error"' not in (line := await asyncio.wait_for(proc.stderr.readline(), 60)):
            assert line, "the solver exited before it tried"
        said = line.decode()
        # which of the two 5 s timeouts fires first (the server's TLS one, the client's connect one)
        # is a race on a loaded machine; either way the silence is named and the fix given
        assert ("expecting INFO" in said or "TimeoutError" in said) and "give its URL as tls://" in said, line
    finally:
        proc.terminate()
        await proc.wait()


async def test_a_tls_url_to_a_plain_server_is_refused_at_once(tmp_path: Path) -> None:
    """`muster whoami --nats-url tls://...` to a server without TLS hung: the handshake ended with
    WRONG_VERSION_NUMBER, which nats-py does not recover from on a first connect (nats.py#718)."""
    async with NatsServer(tmp_path / "nats") as server:
        url = server.url.replace("nats://", "tls://")
        with pytest.raises(TlsRefused, match="the server answered in plain text, so it runs without TLS: give its URL as nats://"):
            await asyncio.wait_for(connect(url, name="plain"), 15)
