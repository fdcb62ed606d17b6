"""The bus side of the `muster` commands: where NATS and the tracker are, the tenant, one way
to connect (failing fast when nobody answers), and how the bus's errors read.

Every command that talks to muster takes the same options (`bus_options`): `--tenant`
(`$MUSTER_TENANT`), `--nats-url` (`$NATS_URL`), `--data-dir` (where `muster up` saved its
URLs); they reach the command as one `Bus`. NATS is found by `muster.bus.connect.nats_url`,
the one resolver services use too.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar, overload
from urllib.parse import urlsplit

import click
import nats.errors
from nats.aio.client import Client

from contracts import subjects
from contracts.commands import Command
from contracts.identity import AuthReply
from contracts.subjects import SubjectError

from .bus import connect as connect_module
from .bus.connect import (
    DATA_DIR,
    CredentialsError,
    auth_required,
    bearer_headers,
    connect,
    credentials,
    jetstream_cased,
    looked_in,
    missing_data_dir,
    nats_url,
    principal_of,
    saved_url,
)
from .bus.eventstore import ConcurrencyError, StoreError
from .bus.wire import cancel_and_wait
from .cli_support import (
    EXIT_DENIED,
    EXIT_INVALID,
    EXIT_UNREACHABLE,
    CliError,
    FilePath,
    credentials_failed,
    new_token,
    translates,
)
from .client import MusterClient, MusterError, NoAnswer, Reply, RequestRejected
from .tls.context import PROBE_AFTER_S, TlsError, TlsRefused, http_connector, http_ssl, speaks_tls

T = TypeVar("T")

DEFAULT_TRACKER_URL = "http://127.0.0.1:8080"


@dataclass(frozen=True)
class Bus:
    """Where one command finds muster, and for which tenant (None: every tenant)."""

    tenant: Any
    explicit_url: str | None
    data_dir: Path
    asked: str | None = None
    """The tenant the user named (--tenant, $MUSTER_TENANT); None: the token's own (reads
    through the tracker, and requests once `resolved`), `default` for operators."""
    tracker: str | None = None
    """`--tracker-url`."""

    @property
    def nats_url(self) -> str:
        return nats_url(self.explicit_url, self.data_dir)

    def http_ssl(self) -> ssl.SSLContext:
        """`ssl=` of a request to the tracker: verifying, with the deployment's CA if it has one."""
        return http_ssl(self.data_dir)

    def tracker_url(self, explicit: str | None = None) -> str:
        """`--tracker-url`, else $MUSTER_TRACKER_URL, else the one `muster up` saved, else the local default."""
        given = [("--tracker-url", explicit or self.tracker), ("$MUSTER_TRACKER_URL", os.environ.get("MUSTER_TRACKER_URL")),
                 (f"{self.data_dir}/tracker.url", saved_url(self.data_dir, "tracker.url")), ("the default", DEFAULT_TRACKER_URL)]
        source, url = next((source, url) for source, url in given if url)
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            # Not "cannot reach the tracker at notaurl ... is `muster up` running?" (exit 3).
            raise CliError(f"the tracker URL {url!r} (from {source}) is not an http:// or https:// URL with a host, "
                           "such as http://127.0.0.1:8080", EXIT_INVALID)
        return url.rstrip("/")


@overload
def bus_options(f: Callable[..., Any], *, all_tenants: bool = False, tenant: bool = True) -> Callable[..., Any]: ...


@overload
def bus_options(f: None = None, *, all_tenants: bool = False, tenant: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]: ...


def bus_options(f: Callable[..., Any] | None = None, *, all_tenants: bool = False, tenant: bool = True) -> Any:
    """--tenant, --nats-url and --data-dir, given to the command as `bus: Bus`. With
    `all_tenants`, --tenant is optional and None means every tenant; `tenant=False` leaves it
    out (commands about the deployment, not a tenant)."""

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def wrapper(*args: Any, nats_url: str | None, data_dir: Path, tracker_url: str | None, **kwargs: Any) -> Any:
            asked = kwargs.pop("tenant", None)
            default = None if all_tenants or not tenant else "default"
            given = DATA_DIR.set(data_dir)
            try:
                return f(*args, bus=Bus(asked if asked is not None else default, nats_url, data_dir, asked, tracker_url), **kwargs)
            finally:
                DATA_DIR.reset(given)

        g: Any = click.option("--data-dir", type=FilePath(file_okay=False, path_type=Path), default=Path(".muster"),
                              show_default=True, envvar="MUSTER_DATA_DIR",
                              help="where `muster up` saved the NATS and tracker URLs and the credentials ($MUSTER_DATA_DIR)")(wrapper)
        g = click.option("--tracker-url", "tracker_url", default=None,
                         help="the tracker, which reads go through (default: $MUSTER_TRACKER_URL, else the one `muster up` saved)")(g)
        g = click.option("--nats-url", "nats_url", envvar="NATS_URL", default=None,
                         help="NATS server URL (default: $NATS_URL, else the one `muster up` saved, else nats://127.0.0.1:4222)")(g)
        if not tenant:
            return g
        if all_tenants:
            return click.option("--tenant", envvar="MUSTER_TENANT", default=None,
                                help="only this tenant ($MUSTER_TENANT; default: every tenant)")(g)
        return click.option("--tenant", envvar="MUSTER_TENANT", default=None,
                            help="tenant ($MUSTER_TENANT; default: the token's own, `default` for operators)")(g)

    return decorate(f) if f is not None else decorate


class Refusals:
    """The permission violations the server reports on a command's connection. The server drops
    a message its sender may not publish and says so on the side, so a refused request would
    wait for an answer that cannot come: `guard` fails it at once, naming what was refused."""

    def __init__(self, on_refused: Callable[[], None] | None = None) -> None:
        self.seen: list[str] = []
        self._refused = asyncio.Event()
        self._on_refused = on_refused

    async def on_error(self, err: Exception) -> None:
        if "permissions violation" in str(err).lower():
            self.seen.append(str(err))
            self._refused.set()
            if self._on_refused is not None:
                self._on_refused()

    async def guard(self, work: Awaitable[T], who: str, tenant: str | None = None) -> T:
        task, refused = asyncio.ensure_future(work), asyncio.ensure_future(self._refused.wait())
        try:
            done, _ = await asyncio.wait({task, refused}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            refused.cancel()
        if task in done:
            return task.result()
        task.cancel()
        raise CliError(self.describe(who, tenant), EXIT_DENIED)

    def describe(self, who: str, tenant: str | None = None) -> str:
        """The refusal in words. nats-py lower-cases the server's whole `-ERR` line, subject
        included: the tenant (and principal) in it are put back as the command had them (a
        request in tenant `Acme` read "in tenant acme"); the rest of a muster subject is lower
        case already (its words, ids, principal ids)."""
        found = re.search(r'for (publish|subscription) to "([^"]+)"', self.seen[-1])
        what, subject = (found.group(1), found.group(2)) if found else ("publish", "?")
        originals = {n.lower(): n for n in (who, tenant) if n}
        subject = jetstream_cased(".".join(originals.get(part, part) for part in subject.split(".")))
        request = re.fullmatch(rf"(?:{re.escape(subjects.OPS)}|{re.escape(subjects.GOV)})\.([^.]+)\.([^.]+)\.([^.]+)", subject)
        if request is not None:
            tenant, name, verb = request.groups()
            why = (f"{who} may not send {verb} requests in tenant {tenant}" if name == who else
                   f"{who} may not send requests in the name of {name}")
            return (f"refused: {why}: a tenant's user sends requests only in its own tenant, in its own name "
                    "(`muster whoami` names them; --tenant)")
        verb = "publish to" if what == "publish" else "subscribe to"
        return f"refused: the bus does not let {who} {verb} {subject}"


async def connect_or_fail(url: str, data_dir: Path | None = None, refusals: Refusals | None = None) -> Client:
    """A connection for one command: a server that does not answer is an error (exit 3),
    not something to wait for."""
    seen: list[Exception] = []

    refused: asyncio.Future[Exception] = asyncio.get_running_loop().create_future()

    async def note(err: Exception) -> None:  # the server's refusal comes as an error, then "no servers"
        seen.append(err)
        if isinstance(err, ConnectionRefusedError) and "," not in url and not refused.done():
            refused.set_result(err)
        if refusals is not None:
            await refusals.on_error(err)

    connecting = asyncio.ensure_future(connect(url, name="muster-cli", max_reconnect_attempts=3, connect_timeout=2, error_cb=note,
                                               disconnected_cb=_quiet, data_dir=data_dir))
    try:
        await _settled(connecting, url, refused)
        return await connecting
    except TlsRefused as err:
        raise CliError(str(err), EXIT_UNREACHABLE) from None
    except CredentialsError as err:
        raise credentials_failed(err) from None
    except TlsError as err:
        raise CliError(str(err), EXIT_INVALID) from None
    except (nats.errors.NoServersError, OSError, TimeoutError) as err:
        if any("authorization violation" in str(e).lower() for e in seen):
            raise CliError(refused_message(credentials().source), EXIT_DENIED) from None
        # Only a server that answered may be a TLS one: where nothing listens the hint misleads.
        listened = not any(isinstance(e, ConnectionRefusedError) for e in (*seen, err))
        plain = " (a TLS server needs a tls:// URL)" if url.startswith("nats://") and listened else ""
        why = "nothing listens there: connection refused" if isinstance(err, ConnectionRefusedError) else type(err).__name__
        from muster.runtime.ps import unanswered

        up = unanswered(data_dir, "nats-server", url)
        if up is not None:
            raise CliError(f"cannot reach NATS at {url} ({why}): {up}", EXIT_UNREACHABLE) from None
        raise CliError(f"cannot reach NATS at {url} ({why}){plain}: is `muster up` running, or NATS_URL set?"
                       f"{missing_data_dir(url, connect_module.DEFAULT_URL, data_dir)}", EXIT_UNREACHABLE) from None
    except nats.errors.Error as err:
        if "authorization violation" not in str(err).lower():
            raise
        raise CliError(refused_message(credentials().source), EXIT_DENIED) from None


async def _settled(connecting: asyncio.Future[Client], url: str, refused: asyncio.Future[Exception]) -> None:
    """Return once `connecting` is done, or fail as soon as how it ends is known: nats-py tries
    4 times, each one up to its connect timeout. `refused` (set by the error callback): the one
    server refused the connection, nothing listens there, and the 3 more tries took 1.5 s to say
    so. A `nats://` server that wants TLS first: it says nothing to a plain client, so each try
    waited out its timeout (about 10 s in all before "cannot reach NATS"); a connect not done
    within `PROBE_AFTER_S` has the server asked, once, beside it (`speaks_tls`)."""
    probe: asyncio.Future[str | None] | None = None
    tls_url: str | None = None
    ends: set[asyncio.Future[Any]] = {connecting, refused}
    try:
        done, _ = await asyncio.wait(ends, timeout=PROBE_AFTER_S, return_when=asyncio.FIRST_COMPLETED)
        if not done and url.startswith("nats://"):
            probe = asyncio.ensure_future(speaks_tls(url.split(",")))
            done, _ = await asyncio.wait({*ends, probe}, return_when=asyncio.FIRST_COMPLETED)
            tls_url = probe.result() if done == {probe} else None
        if not done or done == {probe} and tls_url is None:  # (not TLS: nats-py's tries decide)
            await asyncio.wait(ends, return_when=asyncio.FIRST_COMPLETED)
        if connecting.done():
            return
    finally:
        if probe is not None:
            probe.cancel()
        if not connecting.done():
            await cancel_and_wait(connecting)
    if tls_url is not None:
        raise CliError(f"NATS at {tls_url} wants TLS (it answered a TLS handshake, and says nothing to a plain client): "
                       f"give its URL as tls://{tls_url.removeprefix('nats://')}", EXIT_UNREACHABLE)
    raise refused.result()


async def connect_bus(bus: Bus, refusals: Refusals | None = None) -> Client:
    """`connect_or_fail` for a command on `bus`: a token the bus refuses is said with the
    tracker's reason (expired, revoked, unknown...) and the way to a new one, by every command
    (an operation, a governance request, whoami). They said the possibilities and "`muster
    whoami` asks the tracker which": a second command to learn what the first could ask."""
    try:
        return await connect_or_fail(bus.nats_url, bus.data_dir, refusals)
    except CliError as err:
        if not str(err).startswith("the bus refused the token"):
            raise
        try:
            url = bus.tracker_url()
        except CliError as bad:  # the bus's refusal is the news; the tracker URL's problem is said with it
            reason = str(bad)
        else:
            reason = await reason_from_tracker(bus, url)
        found = credentials()
        raise CliError(refused_token(found.source, reason, found.principal), err.exit_code) from None


def refused_token(source: str, reason: str, principal: str | None) -> str:
    """A token the bus refused: the tracker's reason, and the way on (unless the tracker takes it)."""
    accepted = reason.startswith("the tracker accepts")
    return f"the bus refused the token from {source}; {reason}" + ("" if accepted else f"\n{new_token(principal, reason)}")


async def reason_from_tracker(bus: Bus, url: str) -> str:
    """Why the tracker refuses the token in use, which the bus does not say (nats-server's
    "Authorization Violation" is all it tells a client)."""
    import aiohttp  # only here: a bus command loads no HTTP client (tests/unit/test_startup.py)

    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5), connector=http_connector()) as http:
            async with http.get(f"{url}/v1/whoami", headers=bearer_headers(), ssl=bus.http_ssl()) as resp:
                body = await resp.json()
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return (f"the tracker at {url} did not answer either, so which is unsure: the token is malformed, unknown, expired "
                "or revoked, its principal disabled, or the auth service down")
    if resp.status == 200:
        return "the tracker accepts the token: the auth service is probably down"
    return f"the tracker says: {body.get('error', {}).get('message', resp.status)}"


def without_token(who: str) -> str:
    """A command that found no token and was refused for it (no anonymous client while
    authorization is on): where it looked, and the way on."""
    return (f"the {who} refused a client without a token: none in {looked_in()}; run the command in the folder "
            "`muster up` runs in, or export MUSTER_DATA_DIR=<the deployment's data directory> (or "
            "MUSTER_CREDENTIALS=FILE, `muster token create`: docs/security.md)")


def refused_message(source: str) -> str:
    """nats-server says only "Authorization Violation": what it may mean, and who can tell."""
    if source == "none":
        return without_token("bus")
    return (f"the bus refused the token from {source}: it is malformed, unknown, expired or revoked, its principal is "
            "disabled, or the auth service is down (`muster whoami` asks the tracker which)")


async def _quiet(*_: Any) -> None:
    return None


@asynccontextmanager
async def open_nats(bus: Bus, elsewhere: str = "") -> AsyncIterator[Client]:
    """The connection of an operators' command (`muster planners`, `pool ...`, `provisioners
    drain`). One the bus refuses (a tenant's user's) fails at once, naming what was refused
    (exit 4): the server drops the message and says so on the side, so the command waited out a
    timeout and called muster unreachable, or read nothing and said there were no planners.
    `elsewhere`: where a tenant's people read the same, said with the refusal."""
    task = asyncio.current_task()
    inside = False

    def stop() -> None:
        if inside and task is not None:
            task.cancel()

    refusals = Refusals(on_refused=stop)
    nc = await connect_bus(bus, refusals)
    try:
        inside = True
        yield nc
    except asyncio.CancelledError:
        if not refusals.seen or task is None:
            raise
        task.uncancel()
        raise CliError(f"{refusals.describe(principal_of(nc))}: this command is for operators (super admins; docs/security.md)"
                       + (f"; {elsewhere}" if elsewhere else ""), EXIT_DENIED) from None
    finally:
        inside = False
        await nc.close()


class CliClient(MusterClient):
    """The client of one command: a request the bus refuses fails at once (`Refusals`)."""

    refusals: Refusals

    async def __aenter__(self) -> CliClient:
        return self

    async def send(self, tenant: str, command: Command, timeout: float = 10.0) -> Reply:
        return await self.refusals.guard(super().send(tenant, command, timeout), principal_of(self.nc), tenant)


async def resolved(bus: Bus, nc: Client) -> Bus:
    """The bus with the tenant requests go to: the one asked for, else the token's own (the
    auth service says which), else `default` (operators, a bus without authorization)."""
    if bus.asked is not None or not auth_required(nc):
        return bus
    try:
        reply = AuthReply.model_validate_json((await nc.request(subjects.auth_request(principal_of(nc), "whoami"), b"{}",
                                                                timeout=3)).data)
    except (nats.errors.Error, TimeoutError, ValueError):
        return bus
    tenant = reply.data.get("tenant") if reply.ok and isinstance(reply.data, dict) else None
    return replace(bus, tenant=tenant) if tenant else bus


async def open_client(bus: Bus, requested_by: str | None = None) -> CliClient:
    """The Python client on a fail-fast connection (closed with `async with`), for the tenant
    the command names, else the token's own."""
    refusals = Refusals()
    nc = await connect_bus(bus, refusals)
    client = CliClient(nc, owns_connection=True, tenant=(await resolved(bus, nc)).tenant or "default", requested_by=requested_by)
    client.refusals = refusals
    return client


@translates
def bus_errors(err: BaseException) -> CliError | None:
    """How the bus's and the client's expected failures read."""
    if isinstance(err, RequestRejected):
        return CliError(str(err), EXIT_DENIED if err.reply.code == "forbidden" else EXIT_INVALID)
    if isinstance(err, SubjectError | TlsError):
        return CliError(str(err), EXIT_INVALID)
    if isinstance(err, NoAnswer):
        return CliError(f"{err}: is a planner running?", EXIT_UNREACHABLE)
    if isinstance(err, MusterError):
        return CliError(str(err), EXIT_INVALID)
    if isinstance(err, TimeoutError | nats.errors.TimeoutError):
        return CliError("timed out waiting for muster; the operation may still be running", EXIT_UNREACHABLE)
    if isinstance(err, StoreError | ConcurrencyError | nats.errors.Error):
        return CliError(f"the event log refused or failed: {err or type(err).__name__}", EXIT_UNREACHABLE)
    return None
