"""TLS contexts for muster's clients and servers, and where a client finds what it trusts.

A client trusts, in this order: the CA file named by `$MUSTER_TLS_CA`; the deployment's local CA
(`<data-dir>/tls/ca.pem`, the data directory given, else `$MUSTER_DATA_DIR`, else `./.muster`);
else the system's trusted roots. It always checks the server's certificate and its name: there
is no switch that turns either off. With mutual TLS it presents `$MUSTER_TLS_CERT` and
`$MUSTER_TLS_KEY`, else the data directory's `tls/client.pem` and `tls/client.key` when both
exist (what `muster up --mtls` makes for the local user).

This module imports only the standard library: every process imports it, and the CA
(`muster.tls.ca`, which needs `cryptography`) only the ones that make certificates.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from muster.bus.wire import cancel_and_wait

from .errors import TlsError

CA_ENV, CERT_ENV, KEY_ENV = "MUSTER_TLS_CA", "MUSTER_TLS_CERT", "MUSTER_TLS_KEY"
INSECURE_ENV = "MUSTER_INSECURE_NETWORK"
TLS_DIR = "tls"
CA_FILE = "ca.pem"
CLIENT_CERT, CLIENT_KEY = "client.pem", "client.key"


@dataclass(frozen=True)
class ClientTls:
    """What a client trusts and, with mutual TLS, presents."""

    ca: Path | None
    """None: the system's trusted roots"""
    cert: Path | None = None
    key: Path | None = None

    def describe(self) -> str:
        return f"the CA in {self.ca}" if self.ca else "the system's trusted roots (no $MUSTER_TLS_CA, no local CA found)"


def _data_dirs(data_dir: Path | None) -> list[Path]:
    named = os.environ.get("MUSTER_DATA_DIR")
    found = [data_dir] if data_dir is not None else []
    return [*found, *([Path(named)] if named else []), Path(".muster")]


def client_tls(data_dir: Path | None = None) -> ClientTls:
    """What this process trusts and presents (module docstring)."""
    ca = Path(os.environ[CA_ENV]) if os.environ.get(CA_ENV) else None
    cert = Path(os.environ[CERT_ENV]) if os.environ.get(CERT_ENV) else None
    key = Path(os.environ[KEY_ENV]) if os.environ.get(KEY_ENV) else None
    if (cert is None) != (key is None):
        raise TlsError(f"${CERT_ENV} and ${KEY_ENV} go together: set both (a client certificate and its key) or neither")
    if ca is not None and not ca.is_file():
        raise TlsError(f"${CA_ENV} names {ca}, which is not a file")
    for folder in _data_dirs(data_dir):
        tls = folder / TLS_DIR
        if ca is None and (tls / CA_FILE).is_file():
            ca = tls / CA_FILE
        if cert is None and (tls / CLIENT_CERT).is_file() and (tls / CLIENT_KEY).is_file():
            cert, key = tls / CLIENT_CERT, tls / CLIENT_KEY
        if ca is not None:
            break
    return ClientTls(ca, cert, key)


class _SslEofNoise(logging.Filter):
    """asyncio warns at every close of a TLS connection made by nats-py's transport (its stream
    protocol asks to half-close, which TLS cannot: nats-io/nats.py#727); nothing is wrong."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "eof_received() has no effect when using ssl" not in record.getMessage()


_NOISE = _SslEofNoise()


def client_context(tls: ClientTls) -> ssl.SSLContext:
    """Verifies the server's chain and name (the defaults of `create_default_context`, kept)."""
    logging.getLogger("asyncio").addFilter(_NOISE)  # (a set: once however often)
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(tls.ca) if tls.ca else None)
    except (OSError, ssl.SSLError) as err:  # OpenSSL's words ("no certificate or crl found") do not name the file
        raise TlsError(f"the CA file {tls.ca} cannot be read as PEM certificates ({_said(err)}): name another with "
                       f"${CA_ENV}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if tls.cert is not None and tls.key is not None:
        try:
            context.load_cert_chain(tls.cert, tls.key)
        except (OSError, ssl.SSLError) as err:  # ("PEM lib")
            raise TlsError(f"this client's certificate {tls.cert} with the key {tls.key} cannot be used ({_said(err)}): "
                           f"both PEM, the key the certificate's (${CERT_ENV}, ${KEY_ENV})") from None
    return context


def _said(err: OSError) -> str:
    if isinstance(err, ssl.SSLError):
        return str(err.reason or "not PEM")  # (OpenSSL's "PEM lib" has no reason)
    return str(err.strerror or err)


def server_context(cert: Path, key: Path, client_ca: Path | None = None) -> ssl.SSLContext:
    """A server's context; with `client_ca`, clients must present a certificate it signed."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    if client_ca is not None:
        context.load_verify_locations(cafile=str(client_ca))
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def http_ssl(data_dir: Path | None = None) -> ssl.SSLContext:
    """The `ssl=` of an HTTP request to the tracker (aiohttp): verifying, with the local CA."""
    return client_context(client_tls(data_dir))


def http_connector(**options: Any) -> Any:
    """An aiohttp `TCPConnector` (aiohttp imported only here) that lets go at once of the TLS
    connections it closes. CPython before 3.12.8 leaves the socket under a TLS connection closed
    mid-response (a followed stream read to its end, `muster watch`) open until the garbage
    collector finds it (python/cpython#118960); aiohttp's `enable_cleanup_closed` aborts those
    when the connector closes. A CLI command run in a test's process left one such socket
    behind, reported in an unrelated test."""
    import aiohttp
    from aiohttp.connector import NEEDS_CLEANUP_CLOSED  # (a warning where the interpreter needs no help)

    return aiohttp.TCPConnector(enable_cleanup_closed=NEEDS_CLEANUP_CLOSED, **options)


# -- plain TCP only on loopback ------------------------------------------------------------------


def is_loopback(host: str) -> bool:
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def insecure_network_allowed() -> bool:
    return os.environ.get(INSECURE_ENV, "").lower() in ("1", "true", "yes")


def check_listen(host: str, tls: bool, insecure_network: bool, what: str, how: str) -> None:
    """Plain TCP is allowed on loopback only, unless told `insecure_network`."""
    if tls or insecure_network or is_loopback(host):
        return
    raise TlsError(
        f"refusing to listen on {host} without TLS: {what} would carry bearer tokens in clear to the network. "
        f"{how}, or pass --insecure-network (${INSECURE_ENV}=1) if the network is private and you accept that"
    )


def plain_remote_hosts(urls: list[str]) -> list[str]:
    """The hosts of `nats://` URLs that are not on loopback (tokens would cross the network in clear)."""
    hosts = []
    for url in urls:
        parts = urlsplit(url if "://" in url else f"nats://{url}")
        if parts.scheme in ("nats", "") and parts.hostname and not is_loopback(parts.hostname):
            hosts.append(parts.hostname)
    return hosts


def uses_tls(urls: list[str]) -> bool:
    return any(url.startswith("tls://") for url in urls)


def plain_to_tls(err: BaseException, urls: list[str]) -> str:
    """What nats-py's error means when a plain `nats://` client meets a server that wants the TLS
    handshake first: the server says nothing and hangs up at its TLS timeout, and nats-py calls
    that an empty response. A service retrying it forever would log only that ("" otherwise).
    The server's TLS timeout and the client's connect timeout are both 5 s: on a loaded machine
    the client's fires first and nats-py raises a bare TimeoutError for the same silence."""
    said_nothing = "expecting INFO" in str(err) or isinstance(err, TimeoutError)
    if uses_tls(urls) or not said_nothing:
        return ""
    return "; a server that wants TLS first answers a plain nats:// client nothing: if it runs TLS, give its URL as tls://"


PROBE_AFTER_S = 0.5
"""How long a `nats://` connect of a command goes without an answer before `speaks_tls` asks the
server whether it wants TLS: a loopback connect takes milliseconds, one through an auth callout
on a loaded machine tenths of a second; a connect that is done by then costs nothing more."""
INFO_WAIT_S = 0.3
"""How long `speaks_tls` waits for a plain server's INFO, which it sends as a client connects."""


async def speaks_tls(urls: list[str], wait_s: float = 2.0) -> str | None:
    """The first of the `nats://` URLs whose server wants the TLS handshake first (None: none
    does, or none answered). Such a server says nothing to a plain client (nats-py waits out its
    connect timeout at each try, then calls it an empty response), and answers a ClientHello
    with its ServerHello. Only a ClientHello is sent, once the server has been silent for
    `INFO_WAIT_S` (a plain server's INFO comes at once): nothing of ours crosses, and a plain
    server is not sent bytes it would call a protocol error. Whether the certificate is trusted
    does not matter here (the real connect says that): only whether the server speaks TLS."""
    plain = [url for url in urls if url.startswith("nats://")]
    found = await asyncio.gather(*(_speaks_tls(url, wait_s) for url in plain))
    return next((url for url, tls in zip(plain, found, strict=True) if tls), None)


async def _speaks_tls(url: str, wait_s: float) -> bool:
    parts = urlsplit(url)
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(parts.hostname, parts.port or 4222), wait_s)
    except (OSError, TimeoutError, ValueError):
        return False
    try:
        try:
            await asyncio.wait_for(reader.read(1), INFO_WAIT_S)
            return False  # INFO: a plain server (or one that hung up)
        except TimeoutError:
            pass
        logging.getLogger("asyncio").addFilter(_NOISE)
        try:  # (verifying as every client does: a certificate this client does not trust is a TLS server's all the same)
            await asyncio.wait_for(writer.start_tls(ssl.create_default_context(), server_hostname=parts.hostname), wait_s)
        except ssl.SSLError as err:  # a certificate refused, an alert (mutual TLS): a TLS server; plain text: not one
            return _PLAIN not in str(getattr(err, "reason", "") or err).upper()
        except (OSError, TimeoutError):
            return False
        return True
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except (OSError, ssl.SSLError):
            pass


def nats_options(urls: list[str], data_dir: Path | None = None) -> dict[str, object]:
    """nats-py's TLS options for a connection to `urls`: with `tls://` URLs, a verifying context
    and the TLS handshake first (nothing in clear, no talking down to plain TCP: the servers
    expect it, muster.tls.natsconf). Refuses `nats://` to another host than loopback, where the
    token would cross the network in clear, unless $MUSTER_INSECURE_NETWORK says so."""
    if uses_tls(urls):
        if not all(url.startswith("tls://") for url in urls):
            raise TlsError(f"the NATS URLs mix tls:// and plain ones ({','.join(urls)}): give every server as tls://")
        return {"tls": client_context(client_tls(data_dir)), "tls_handshake_first": True}
    remote = plain_remote_hosts(urls)
    if remote and not insecure_network_allowed():
        raise TlsError(f"refusing to send credentials in clear to {', '.join(remote)}: give its NATS URL as tls://"
                       f" (the server needs TLS), or set ${INSECURE_ENV}=1 if the network is private and you accept that")
    return {}


def refusal(err: BaseException) -> bool:
    """A TLS failure that trying again cannot mend: the server's certificate is not trusted or
    does not name the host, or the server refused ours (mutual TLS)."""
    if isinstance(err, ssl.SSLCertVerificationError):
        return True
    text = f"{getattr(err, 'reason', '')} {err}".upper()
    return isinstance(err, ssl.SSLError) and ("CERTIFICATE" in text or "UNKNOWN_CA" in text or _PLAIN in text)


_PLAIN = "WRONG_VERSION_NUMBER"
"""OpenSSL's words for a server that answered the handshake in plain text: a `tls://` URL to a
server without TLS. nats-py then hung (nats-io/nats.py#718), and `muster whoami` with it."""


async def connect_verified(connect: Callable[..., Awaitable[None]], settings: dict[str, Any], data_dir: Path | None) -> None:
    """`connect(**settings)` (nats-py's), failing with a TlsError at the first refusal of the
    TLS handshake: nats-py would hang after one on a first connect (it waits for the plain
    socket that TLS took over to close: nats-io/nats.py#718), and a refusal is not mended by
    waiting anyway. `settings["error_cb"]` still hears every error."""
    refused: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()
    told = settings.get("error_cb")

    async def on_error(err: Exception) -> None:
        if refusal(err) and not refused.done():
            refused.set_result(err)
        if told is not None:
            await told(err)

    connecting: asyncio.Future[Any] = asyncio.ensure_future(connect(**{**settings, "error_cb": on_error}))
    try:
        await asyncio.wait([connecting, refused], return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not connecting.done():
            await cancel_and_wait(connecting)  # (a cancel nats-py's connect swallowed: it went on for ever)
    if connecting.done() and not connecting.cancelled() and connecting.exception() is None:
        return
    if refused.done():
        err = refused.result()
        servers = ",".join(str(s) for s in settings.get("servers", ()))
        tls = client_tls(data_dir)
        if _PLAIN in str(getattr(err, "reason", "") or err).upper():
            raise TlsRefused(f"the TLS handshake with NATS at {servers} failed: the server answered in plain text, "
                             "so it runs without TLS: give its URL as nats:// (on loopback), or start it with TLS")
        mine = refused_ours(err, tls)
        if mine is not None:
            raise TlsRefused(f"the TLS handshake with NATS at {servers} failed: {mine}")
        why = getattr(err, "verify_message", None) or getattr(err, "reason", None) or str(err)
        raise TlsRefused(f"the TLS handshake with NATS at {servers} failed: {why}; this client trusts "
                         f"{tls.describe()} (${CA_ENV} names a CA file; the server's certificate must "
                         f"name the host of the URL; with mutual TLS, ${CERT_ENV} and ${KEY_ENV} name this client's)")
    connecting.result()  # raises its error


# The server's alerts when it refuses this client's certificate (mutual TLS). OpenSSL names them
# in its code words, and the CA this client trusts has nothing to do with them.
_ALERTS = {
    "CERTIFICATE_REQUIRED": "the server asks for a client certificate (mutual TLS) and this client showed none",
    "UNKNOWN_CA": "the server does not trust this client's certificate {cert}: it is not of the server's CA",
    "CERTIFICATE_EXPIRED": "the server refused this client's certificate {cert}: it has ended",
}


def refused_ours(err: BaseException, tls: ClientTls) -> str | None:
    """Why the server refused this client's certificate, when the handshake ended with its alert
    (None: this client refused the server's, or another failure)."""
    reason = str(getattr(err, "reason", "") or "")
    if isinstance(err, ssl.SSLCertVerificationError) or "ALERT" not in reason:
        return None
    said = next((text for alert, text in _ALERTS.items() if alert in reason),
                "the server refused this client's certificate {cert}")
    cert = tls.cert if tls.cert is not None else "(none)"
    return (f"{said.format(cert=cert)} ({reason}); ${CERT_ENV} and ${KEY_ENV} name this client's certificate and key "
            f"(`muster up --mtls` makes {TLS_DIR}/{CLIENT_CERT} and {CLIENT_KEY} in its data directory, which a command "
            "run where it finds that directory presents)")


class TlsRefused(TlsError):
    """The TLS handshake was refused, by this side or the server (not a network fault)."""


def http_refusal(err: BaseException, url: str, data_dir: Path | None = None) -> str | None:
    """What a failed HTTPS request to the tracker means when its TLS handshake was refused (an
    aiohttp error wrapping the ssl one), in the words of `connect_verified`'s; None otherwise.
    aiohttp's own text ("Cannot connect to host ...") reads like a tracker that is down."""
    cause = getattr(err, "certificate_error", None) or getattr(err, "os_error", None)
    if not isinstance(cause, ssl.SSLError) or not refusal(cause):
        return None
    if _PLAIN in str(getattr(cause, "reason", "") or cause).upper():
        return (f"the TLS handshake with the tracker at {url} failed: it answered in plain text, so it serves "
                "HTTP: give its URL as http:// (on loopback), or start it with TLS")
    why = getattr(cause, "verify_message", None) or getattr(cause, "reason", None) or str(cause)
    return (f"the TLS handshake with the tracker at {url} failed: {why}; this client trusts "
            f"{client_tls(data_dir).describe()} (${CA_ENV} names a CA file; the tracker's certificate must name the "
            "host of the URL)")


async def served_serial(url: str, context: ssl.SSLContext) -> int:
    """The serial number of the certificate a TLS server (`tls://` or `https://` host:port) presents
    to a new connection now: which one it serves, before and after a rotation."""
    parts = urlsplit(url)
    _, writer = await asyncio.open_connection(parts.hostname, parts.port, ssl=context)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
    from .ca import serial_of

    return serial_of(der)
