"""What a client trusts, what it refuses to do in clear, where servers may listen (muster/tls/context.py)."""

from __future__ import annotations

import re
import ssl
from pathlib import Path

import pytest

from muster.tls.ca import LocalCA
from muster.tls.context import (
    CA_ENV,
    CERT_ENV,
    INSECURE_ENV,
    KEY_ENV,
    ClientTls,
    TlsError,
    check_listen,
    client_context,
    client_tls,
    is_loopback,
    nats_options,
    plain_to_tls,
    refusal,
    server_context,
)

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in (CA_ENV, CERT_ENV, KEY_ENV, INSECURE_ENV, "MUSTER_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # no ./.muster of the tree


def test_the_ca_named_wins_then_the_data_dirs_then_the_system(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert client_tls() == ClientTls(None)
    local = LocalCA.load_or_create(tmp_path / ".muster" / "tls")
    assert client_tls().ca == Path(".muster/tls/ca.pem")
    given = LocalCA.load_or_create(tmp_path / "given" / "tls")
    assert client_tls(tmp_path / "given").ca == given.cert_path
    monkeypatch.setenv("MUSTER_DATA_DIR", str(tmp_path / "given"))
    assert client_tls().ca == given.cert_path
    monkeypatch.setenv(CA_ENV, str(local.cert_path))
    assert client_tls(tmp_path / "given").ca == local.cert_path
    monkeypatch.setenv(CA_ENV, str(tmp_path / "missing.pem"))
    with pytest.raises(TlsError, match="not a file"):
        client_tls()


def test_a_client_certificate_comes_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = LocalCA.load_or_create(tmp_path / ".muster" / "tls")
    assert client_tls().cert is None
    own = ca.issue(tmp_path / ".muster" / "tls" / "client", "me", server=False)
    assert (client_tls().cert, client_tls().key) == (Path(".muster/tls/client.pem"), Path(".muster/tls/client.key"))
    monkeypatch.setenv(CERT_ENV, str(own.cert))
    with pytest.raises(TlsError, match="go together"):
        client_tls()
    monkeypatch.setenv(KEY_ENV, str(own.key))
    assert client_context(client_tls()).verify_mode == ssl.CERT_REQUIRED


def test_a_client_context_always_checks_the_chain_and_the_name(tmp_path: Path) -> None:
    for tls in (ClientTls(None), ClientTls(LocalCA.load_or_create(tmp_path).cert_path)):
        context = client_context(tls)
        assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
        assert context.minimum_version >= ssl.TLSVersion.TLSv1_2


def test_tls_urls_shake_hands_first_and_plain_ones_stay_on_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    options = nats_options(["tls://a.example:4222", "tls://b.example:4222"])
    assert options["tls_handshake_first"] is True and isinstance(options["tls"], ssl.SSLContext)
    assert nats_options(["nats://127.0.0.1:4222", "nats://localhost:1", "nats://[::1]:2"]) == {}
    with pytest.raises(TlsError, match=r"refusing to send credentials in clear to nats.example"):
        nats_options(["nats://nats.example:4222"])
    with pytest.raises(TlsError, match="mix tls:// and plain"):
        nats_options(["tls://127.0.0.1:1", "nats://127.0.0.1:2"])
    monkeypatch.setenv(INSECURE_ENV, "1")
    assert nats_options(["nats://nats.example:4222"]) == {}


def test_plain_tcp_listens_on_loopback_only_unless_told() -> None:
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        assert is_loopback(host)
        check_listen(host, tls=False, insecure_network=False, what="x", how="y")
    for host in ("0.0.0.0", "::", "10.1.2.3", "muster.example"):
        with pytest.raises(TlsError, match=f"refusing to listen on {re.escape(host)} without TLS.*--insecure-network"):
            check_listen(host, tls=False, insecure_network=False, what="the tracker", how="give it --tls-cert")
        check_listen(host, tls=True, insecure_network=False, what="x", how="y")
        check_listen(host, tls=False, insecure_network=True, what="x", how="y")


def test_only_refusals_of_the_handshake_end_a_first_connect() -> None:
    verify = ssl.SSLCertVerificationError(1, "certificate verify failed")
    assert refusal(verify)
    required = ssl.SSLError(1, "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert certificate required")
    assert refusal(required)
    assert refusal(ssl.SSLError(1, "[SSL: TLSV1_ALERT_UNKNOWN_CA] tlsv1 alert unknown ca"))
    assert refusal(ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number"))  # a server without TLS
    assert not refusal(ssl.SSLEOFError(8, "EOF occurred in violation of protocol"))
    assert not refusal(ConnectionRefusedError())


def test_no_code_turns_verification_off() -> None:
    """No "insecure" switch anywhere: nothing disables checking a certificate or its name."""
    banned = re.compile(r"CERT_NONE|check_hostname\s*=\s*False|ssl\s*=\s*False|verify_ssl\s*=\s*False|insecure:\s*true|"
                        r"_create_unverified_context|ignore-certificate-errors(?!-spki-list)")
    found = [f"{path.relative_to(ROOT)}:{n}" for folder in ("muster", "services", "contracts", "deploy")
             for path in (ROOT / folder).rglob("*") if path.suffix in (".py", ".conf", ".yaml", ".json", ".sh")
             for n, line in enumerate(path.read_text().splitlines(), 1) if banned.search(line)]
    assert not found, found


async def test_a_refused_https_handshake_with_the_tracker_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not "cannot reach the tracker ... is `muster up` running?": it answered, and the client
    refused its certificate (another CA, or one that does not name the host of the URL)."""
    from aiohttp import web

    from muster.cli_bus import Bus
    from muster.cli_support import EXIT_UNREACHABLE, CliError
    from muster.tracker_client import TrackerReads

    ca = LocalCA.load_or_create(tmp_path / ".muster" / "tls")
    pair = ca.issue(tmp_path / "tracker", "muster tracker", ["127.0.0.1"])
    runner = web.AppRunner(web.Application())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_context(pair.cert, pair.key))
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    other = LocalCA.load_or_create(tmp_path / "other")

    async def read(url: str) -> CliError:
        async with TrackerReads(Bus(tenant=None, explicit_url=None, data_dir=tmp_path / ".muster", tracker=url)) as tracker:
            with pytest.raises(CliError) as refused:
                await tracker.get("/v1/whoami")
        assert refused.value.exit_code == EXIT_UNREACHABLE
        return refused.value

    try:
        err = await read(f"https://localhost:{port}")
        assert err.message.startswith(f"the TLS handshake with the tracker at https://localhost:{port} failed: Hostname mismatch")
        assert "this client trusts the CA in" in err.message and "is `muster up` running" not in err.message
        monkeypatch.setenv(CA_ENV, str(other.cert_path))
        err = await read(f"https://127.0.0.1:{port}")
        assert "failed: unable to get local issuer certificate; this client trusts the CA in " + str(other.cert_path) in err.message
        err = await read(f"http://127.0.0.1:{port}")
        assert "(a tracker serving HTTPS needs an https:// URL)" in err.message
    finally:
        await runner.cleanup()


def test_a_trust_or_client_file_that_is_not_pem_is_named(tmp_path: Path) -> None:
    """Not "internal error (SSLError: ... PEM lib)": which file, and which variable names it."""
    ca = LocalCA.load_or_create(tmp_path / "ca")
    own, other = ca.issue(tmp_path / "me", "me", server=False), ca.issue(tmp_path / "you", "you", server=False)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(TlsError, match=f"the CA file {garbage} cannot be read as PEM certificates .*MUSTER_TLS_CA"):
        client_context(ClientTls(garbage))
    with pytest.raises(TlsError, match=f"this client's certificate {garbage} with the key {own.key} cannot be used \\(not PEM\\)"):
        client_context(ClientTls(ca.cert_path, garbage, own.key))
    with pytest.raises(TlsError, match=f"certificate {own.cert} with the key {other.key} cannot be used \\(KEY_VALUES_MISMATCH\\)"):
        client_context(ClientTls(ca.cert_path, own.cert, other.key))


def test_a_plain_client_meeting_silence_is_told_to_give_tls_whichever_timeout_fired() -> None:
    plain, tls = ["nats://127.0.0.1:4222"], ["tls://127.0.0.1:4222"]
    server_hung_up = Exception("nats: empty response from server when expecting INFO message")
    for err in (server_hung_up, TimeoutError()):
        assert "give its URL as tls://" in plain_to_tls(err, plain)
        assert plain_to_tls(err, tls) == ""
    assert plain_to_tls(ConnectionRefusedError("refused"), plain) == ""


async def test_an_https_url_to_a_plain_tracker_says_it_serves_http(tmp_path: Path) -> None:
    """`--tracker-url https://...` to a tracker without TLS read "cannot reach the tracker ...
    (ClientConnectorSSLError): is `muster up` running?" though it answered, in plain text."""
    from aiohttp import web

    from muster.cli_bus import Bus
    from muster.cli_support import EXIT_UNREACHABLE, CliError
    from muster.tracker_client import TrackerReads

    runner = web.AppRunner(web.Application())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    url = f"https://127.0.0.1:{port}"
    try:
        async with TrackerReads(Bus(tenant=None, explicit_url=None, data_dir=tmp_path / ".muster", tracker=url)) as tracker:
            with pytest.raises(CliError) as refused:
                await tracker.get("/v1/whoami")
    finally:
        await runner.cleanup()
    assert refused.value.exit_code == EXIT_UNREACHABLE
    assert refused.value.message == (f"the TLS handshake with the tracker at {url} failed: it answered in plain text, so it "
                                     "serves HTTP: give its URL as http:// (on loopback), or start it with TLS")
