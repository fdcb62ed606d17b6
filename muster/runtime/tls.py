"""The certificates of a `muster up --tls` deployment, in `<data-dir>/tls/` (every file mode 0600):

| file | what |
|---|---|
| `ca.pem`, `ca.key` | the local CA, made on first start; clients trust `ca.pem` |
| `servers/nats.pem`, `.key` | nats-server's, for its client port |
| `servers/tracker.pem`, `.key` | the tracker's HTTPS |
| `client.pem`, `.key` | with `--mtls`: the local user's client certificate (the CLI presents it) |
| `clients/<process>.pem`, `.key` | with `--mtls`: each service process's client certificate |

Server certificates name loopback (`localhost`, `127.0.0.1`, `::1`), the listen address and,
when that is not loopback, this host's names, plus any `--tls-name`. They are made again at a
start when missing, near their end, or not naming every one of those, and by `muster up` when
they come near their end while it runs (`renewal_in`); `rotate` makes new ones (new keys) at
once and the running servers reload them (docs/security.md, "TLS"). `ca.pem` without `ca.key`
is an operator's CA: the operator's certificates in `servers/` are then checked and served as
they are, never made here (`issuing`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import signal
import socket
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from muster.bus.server import reachable
from muster.tls.context import CA_ENV, CERT_ENV, CLIENT_CERT, KEY_ENV, TlsError, is_loopback
from muster.tls.natsconf import ServerTls

SERVERS = ("nats", "tracker")


def server_names(host: str, extra: tuple[str, ...] = ()) -> list[str]:
    names = ["localhost", "127.0.0.1", "::1"]
    if host not in ("0.0.0.0", "::", ""):
        names.append(host)
    if not is_loopback(host):
        names += [socket.gethostname(), socket.getfqdn()]
    return list(dict.fromkeys([*names, *extra]))


@dataclass
class DeploymentTls:
    folder: Path
    host: str = "127.0.0.1"
    mutual: bool = False
    """clients must present a certificate of the CA too (mutual TLS on the bus)"""
    names: tuple[str, ...] = ()
    """more names (DNS or IP) the server certificates carry"""

    @property
    def ca(self) -> Path:
        return self.folder / "ca.pem"

    def server_pair(self, name: str) -> tuple[Path, Path]:
        base = self.folder / "servers" / name
        return base.with_suffix(".pem"), base.with_suffix(".key")

    @property
    def issuing(self) -> bool:
        """Does muster hold the CA's key (it made the CA, or was given it) and so issue, renew and
        rotate the certificates? `ca.pem` without `ca.key` is an operator's CA: the certificates
        in `servers/` are the operator's, used as they are and never replaced."""
        return (self.folder / "ca.key").exists() or not self.ca.exists()

    def prepare(self) -> None:
        """The CA and the server certificates (and the local user's client certificate with
        mutual TLS), made where missing or stale; kept otherwise. An operator's certificates
        (`issuing` is false) are checked, and a TlsError names what is wrong with them."""
        from muster.tls.ca import LocalCA

        if not self.issuing:
            if self.mutual:
                raise TlsError(f"--mtls needs the CA's key ({self.folder / 'ca.key'}) to make each process's client "
                               f"certificate, and {self.ca} is there without it (an operator's CA): run with --tls only, "
                               "or add the key")
            self.check_given()
            return
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        ca = LocalCA.load_or_create(self.folder)
        for name in SERVERS:
            ca.ensure(self.folder / "servers" / name, f"muster {name}", server_names(self.host, self.names))
        if self.mutual:
            ca.ensure(self.folder / Path(CLIENT_CERT).stem, "muster local user", server=False)

    def check_given(self) -> None:
        """An operator's server certificates, before the servers are given them: each there,
        readable, with its key, within its dates, naming the host of the URLs `muster up` gives
        (and every `--tls-name`), chaining to `ca.pem`: what every client will check at each
        handshake, checked once here, so a mismatched pair stops the start in a sentence."""
        from cryptography import x509

        from muster.tls.ca import alt_names, check_server_pair, names_of
        from muster.tls.chain import check_chain

        wanted = list(dict.fromkeys([reachable(self.host).strip("[]"), *self.names]))
        for name in SERVERS:
            cert, key = self.server_pair(name)
            if not cert.exists() or not key.exists():
                raise TlsError(f"{self.ca} is there without ca.key, so muster serves the operator's certificates as they "
                               f"are, and {cert if not cert.exists() else key} is missing: give {name}'s certificate and "
                               f"key there, signed by that CA, naming {', '.join(wanted)}")
            try:
                check_server_pair(cert, key)
                named = names_of(x509.load_pem_x509_certificate(cert.read_bytes()))
            except ValueError as err:
                raise TlsError(str(err)) from None
            missing = [n for n in (str(h.value) for h in alt_names(wanted)) if n not in named]
            if missing:
                raise TlsError(f"the certificate in {cert} does not name {', '.join(missing)}, which clients of this "
                               f"deployment dial (it names {', '.join(sorted(named)) or 'nothing'})")
            for host in wanted:  # each name a client may dial, as it dials it (an IP address is no DNS name)
                check_chain(cert, key, self.ca, host)

    def rotate(self) -> None:
        """New keys and certificates for the servers, signed by the same CA (clients keep
        trusting it), and the local user's client certificate made again if it is near its end;
        the caller has the servers reload theirs. An operator's certificates are not made here:
        the operator replaced the files, and they are checked before the servers read them."""
        from muster.tls.ca import LocalCA

        if not self.issuing:
            self.check_given()
            return
        ca = LocalCA.load_or_create(self.folder)
        for name in SERVERS:
            ca.issue(self.folder / "servers" / name, f"muster {name}", server_names(self.host, self.names))
        if self.mutual:
            ca.ensure(self.folder / Path(CLIENT_CERT).stem, "muster local user", server=False)

    def renewal_in(self) -> float:
        """Seconds until the first of the certificates `prepare` keeps (the servers', the local
        user's) comes within RENEW_BEFORE_DAYS of its end, when a start would make it again; 0
        when one is missing or due."""
        from muster.tls.ca import RENEW_BEFORE_DAYS, not_after

        files = [self.server_pair(name)[0] for name in SERVERS] + ([self.folder / CLIENT_CERT] if self.mutual else [])
        try:
            first = min(not_after(f) for f in files)
        except (OSError, ValueError):
            return 0.0
        return max(0.0, (first - dt.datetime.now(dt.UTC) - dt.timedelta(days=RENEW_BEFORE_DAYS)).total_seconds())

    def nats(self) -> ServerTls:
        cert, key = self.server_pair("nats")
        return ServerTls(str(cert), str(key), str(self.ca), verify_clients=self.mutual)

    def tracker_args(self) -> list[str]:
        cert, key = self.server_pair("tracker")
        return ["--tls-cert", str(cert), "--tls-key", str(key)]

    def child_env(self, name: str) -> dict[str, str]:
        """What a child trusts and, with mutual TLS, presents (its own certificate)."""
        env = {CA_ENV: str(self.ca)}
        if self.mutual:
            from muster.tls.ca import LocalCA

            pair = LocalCA.load_or_create(self.folder).ensure(self.folder / "clients" / name, f"muster {name}", server=False)
            env.update({CERT_ENV: str(pair.cert), KEY_ENV: str(pair.key)})
        return env


class Reloading(Protocol):
    """A child process of the deployment (`supervisor.Child`), as a rotation sees it."""

    process: asyncio.subprocess.Process
    started: asyncio.Event
    reloaded: asyncio.Event


async def reload_child(child: Reloading) -> None:
    """Have a running child read its files again (a tracker its rotated certificate; a notifier,
    pool service or planner its settings: `muster reload`): SIGHUP once its start is done (its
    handler is set before it says it started; a SIGHUP before would end it), then its word that
    it reloaded. A child that exits meanwhile needs nothing: the process started in its place
    (by the supervisor) reads the new files."""
    exited = asyncio.ensure_future(child.process.wait())
    try:
        if await _before(child.started.wait(), exited):
            child.reloaded.clear()
            with contextlib.suppress(ProcessLookupError):  # it exited just now
                child.process.send_signal(signal.SIGHUP)
            await _before(child.reloaded.wait(), exited)
    finally:
        exited.cancel()


async def _before(waiting: Coroutine[Any, Any, Any], exited: asyncio.Future[int]) -> bool:
    """Whether `waiting` came before the process exited."""
    task: asyncio.Future[Any] = asyncio.ensure_future(waiting)
    try:
        await asyncio.wait([task, exited], return_when=asyncio.FIRST_COMPLETED)
    finally:
        task.cancel()
    return task.done() and not task.cancelled()
