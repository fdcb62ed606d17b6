"""The bus side of the `muster` commands: where NATS and the tracker are, the tenant, one way
to connect (failing fast when nobody answers), and how the bus's errors read.

Every command that talks to muster takes the same options (`bus_options`): `--tenant`
(`$MUSTER_TENANT`), `--nats-url` (`$NATS_URL`), `--data-dir` (where `muster up` saved its
URLs); they reach the command as one `Bus`. NATS is found by `muster.bus.connect.nats_url`,
the one resolver services use too.
"""

from __future__ import annotations

import functools
import os
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import click
import nats.errors
from nats.aio.client import Client

from contracts.subjects import SubjectError

from .bus.connect import CredentialsError, connect, credentials, nats_url, saved_url
from .bus.eventstore import ConcurrencyError, StoreError
from .cli_support import EXIT_INVALID, EXIT_UNREACHABLE, CliError, translates
from .client import MusterClient, MusterError, NoAnswer, RequestRejected
from .tls.context import TlsError, TlsRefused, http_ssl

DEFAULT_TRACKER_URL = "http://127.0.0.1:8080"


@dataclass(frozen=True)
class Bus:
    """Where one command finds muster, and for which tenant (None: every tenant)."""

    tenant: Any
    explicit_url: str | None
    data_dir: Path

    @property
    def nats_url(self) -> str:
        return nats_url(self.explicit_url, self.data_dir)

    def http_ssl(self) -> ssl.SSLContext:
        """`ssl=` of a request to the tracker: verifying, with the deployment's CA if it has one."""
        return http_ssl(self.data_dir)

    def tracker_url(self, explicit: str | None = None) -> str:
        """`--tracker-url`, else $MUSTER_TRACKER_URL, else the one `muster up` saved, else the local default."""
        url = explicit or os.environ.get("MUSTER_TRACKER_URL") or saved_url(self.data_dir, "tracker.url") or DEFAULT_TRACKER_URL
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
        def wrapper(*args: Any, nats_url: str | None, data_dir: Path, **kwargs: Any) -> Any:
            return f(*args, bus=Bus(kwargs.pop("tenant", None), nats_url, data_dir), **kwargs)

        g: Any = click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=Path(".muster"),
                              show_default=True, envvar="MUSTER_DATA_DIR",
                              help="where `muster up` saved the NATS and tracker URLs ($MUSTER_DATA_DIR)")(wrapper)
        g = click.option("--nats-url", "nats_url", envvar="NATS_URL", default=None,
                         help="NATS server URL (default: $NATS_URL, else the one `muster up` saved, else nats://127.0.0.1:4222)")(g)
        if not tenant:
            return g
        if all_tenants:
            return click.option("--tenant", envvar="MUSTER_TENANT", default=None,
                                help="only this tenant ($MUSTER_TENANT; default: every tenant)")(g)
        return click.option("--tenant", envvar="MUSTER_TENANT", default="default", show_default=True,
                            help="tenant ($MUSTER_TENANT)")(g)

    return decorate(f) if f is not None else decorate


async def connect_or_fail(url: str, data_dir: Path | None = None) -> Client:
    """A connection for one command: a server that does not answer is an error (exit 3),
    not something to wait for."""
    seen: list[Exception] = []

    async def note(err: Exception) -> None:  # the server's refusal comes as an error, then "no servers"
        seen.append(err)

    try:
        return await connect(url, name="muster-cli", max_reconnect_attempts=3, connect_timeout=2, error_cb=note,
                             disconnected_cb=_quiet, data_dir=data_dir)
    except TlsRefused as err:
        raise CliError(str(err), EXIT_UNREACHABLE) from None
    except (CredentialsError, TlsError) as err:
        raise CliError(str(err), EXIT_INVALID) from None
    except (nats.errors.NoServersError, OSError, TimeoutError) as err:
        if any("authorization violation" in str(e).lower() for e in seen):
            raise CliError(refused_message(credentials().source), EXIT_INVALID) from None
        plain = " (a TLS server needs a tls:// URL)" if url.startswith("nats://") else ""
        raise CliError(f"cannot reach NATS at {url} ({type(err).__name__}){plain}: is `muster up` running, or NATS_URL set?",
                       EXIT_UNREACHABLE) from None
    except nats.errors.Error as err:
        if "authorization violation" not in str(err).lower():
            raise
        raise CliError(refused_message(credentials().source), EXIT_INVALID) from None


def refused_message(source: str) -> str:
    """nats-server says only "Authorization Violation": what it may mean, and who can tell."""
    return (f"the bus refused the token from {source}: it is malformed, unknown, expired or revoked, its principal is "
            "disabled, or the auth service is down (`muster whoami` asks the tracker which)")


async def _quiet(*_: Any) -> None:
    return None


@asynccontextmanager
async def open_nats(bus: Bus) -> AsyncIterator[Client]:
    nc = await connect_or_fail(bus.nats_url, bus.data_dir)
    try:
        yield nc
    finally:
        await nc.close()


async def open_client(bus: Bus, requested_by: str | None = None) -> MusterClient:
    """The Python client on a fail-fast connection (closed with `async with`)."""
    return MusterClient(await connect_or_fail(bus.nats_url, bus.data_dir), owns_connection=True, tenant=bus.tenant or "default",
                        requested_by=requested_by)


@translates
def bus_errors(err: BaseException) -> CliError | None:
    """How the bus's and the client's expected failures read."""
    if isinstance(err, RequestRejected | SubjectError | TlsError):
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
