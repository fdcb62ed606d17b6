"""One way to connect to NATS, with reconnects that never give up while a service runs.

Credentials (docs/security.md): the bearer token is, in this order, the `token` argument,
`$MUSTER_TOKEN`, the credentials file named by `$MUSTER_CREDENTIALS`, `./.muster/credentials`
(written by `muster up`), `~/.config/muster/credentials`. A credentials file must be private
(mode 0600): one readable by others is refused, as ssh refuses such a key. The token's principal
names the connection's subjects and its inbox (`_INBOX.<principal>`), which is all the server
lets it subscribe to.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from nats.aio.client import Client

from contracts import subjects
from contracts.tokens import TokenError, principal_of_token
from muster.tls.context import connect_verified, nats_options, plain_to_tls

from . import wire

log = structlog.get_logger("muster.bus")

DEFAULT_URL = "nats://127.0.0.1:4222"
CREDENTIALS_FILES = (Path(".muster") / "credentials", Path.home() / ".config" / "muster" / "credentials")


DATA_DIR: ContextVar[Path | None] = ContextVar("muster_data_dir", default=None)
"""A command's `--data-dir` (muster/cli_bus.py sets it while the command runs): where its NATS
URL and CA are found, so its credentials too, as $MUSTER_DATA_DIR's are."""


def _credentials_files() -> list[Path]:
    """Where a credentials file is looked for: the deployment's data directory given to the
    command (`--data-dir`) or named by $MUSTER_DATA_DIR (what `muster up` tells other shells to
    export) first."""
    data_dir = DATA_DIR.get() or os.environ.get("MUSTER_DATA_DIR")
    found = [Path(data_dir) / "credentials", *CREDENTIALS_FILES] if data_dir else list(CREDENTIALS_FILES)
    return list(dict.fromkeys(found))  # the default `--data-dir .muster` is the first default file: said once


def missing_data_dir(url: str, default: str, data_dir: Path | None) -> str:
    """Why a command tried the default `url`, when that is a data directory that is not there (a
    typo in `--data-dir` or $MUSTER_DATA_DIR; else the default URL tried reads as muster down)."""
    if url != default or data_dir is None or data_dir.is_dir():
        return ""
    return f"; no data directory {data_dir} (where `muster up` runs: --data-dir, $MUSTER_DATA_DIR), so the default was tried"


def looked_in() -> str:
    """Where a token was looked for, for the message of a command that found none."""
    return ", ".join(["$MUSTER_TOKEN", "$MUSTER_CREDENTIALS", *(str(p) for p in _credentials_files())])


class CredentialsError(RuntimeError):
    """A credentials source that exists but cannot be used; the message says why and how to fix it."""


class TokenUnusable(CredentialsError):
    """A token that is no token (cut short when pasted, another system's): refused as the bus and
    the tracker refuse an unknown one (exit 4, a new token the way on), not as a bad file."""


@dataclass(frozen=True)
class Credentials:
    token: str | None
    principal: str
    source: str
    """where the token came from (for messages; never the token)"""


def saved_url(data_dir: Path | None, name: str) -> str | None:
    """A URL `muster up` saved in its data folder (`nats.url`, `tracker.url`), if any."""
    if data_dir is None or not (data_dir / name).is_file():
        return None
    return (data_dir / name).read_text().strip() or None


def nats_url(explicit: str | None = None, data_dir: Path | None = None) -> str:
    """The one way to find NATS: the URL given, else $NATS_URL, else the one `muster up` saved
    in `data_dir`, else the local default. Services and commands alike."""
    return explicit or os.environ.get("NATS_URL") or saved_url(data_dir, "nats.url") or DEFAULT_URL


def default_data_dir() -> Path:
    """Where `muster up` saved what another shell needs when nobody says: $MUSTER_DATA_DIR, else
    `./.muster` (docs/runtime.md)."""
    return Path(os.environ.get("MUSTER_DATA_DIR") or ".muster")


def read_credentials_file(path: Path) -> str:
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CredentialsError(f"credentials file {path} is readable by others (mode {stat.S_IMODE(mode):04o}); run: chmod 600 {path}")
    text = path.read_text().strip()
    try:
        token = json.loads(text)["token"] if text.startswith("{") else text
    except (ValueError, KeyError, TypeError):
        raise CredentialsError(f"credentials file {path} is not JSON with a \"token\" field") from None
    if not isinstance(token, str) or not token:
        raise CredentialsError(f"credentials file {path} holds no token")
    return token


def write_credentials_file(path: Path, token: str, **extra: Any) -> None:
    """Create (or replace) a credentials file that only its owner can read."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"token": token, **extra}, f)
        f.write("\n")
    os.replace(tmp, path)


def credentials(token: str | None = None) -> Credentials:
    source = "the token argument"
    if token is None and os.environ.get("MUSTER_TOKEN"):
        token, source = os.environ["MUSTER_TOKEN"], "$MUSTER_TOKEN"
    if token is None:
        named = os.environ.get("MUSTER_CREDENTIALS")
        for path in [Path(named)] if named else _credentials_files():
            if path.is_file():
                token, source = read_credentials_file(path), str(path)
                break
        else:
            if named:
                raise CredentialsError(f"$MUSTER_CREDENTIALS names {named}, which is not a file")
    if token is None:
        return Credentials(None, subjects.ANONYMOUS, "none")
    try:
        return Credentials(token, principal_of_token(token), source)
    except TokenError as err:
        raise TokenUnusable(f"the token from {source} is unusable: {err}") from None


_JS_WORDS = frozenset({"$js", "api", "stream", "consumer", "info", "names", "list", "create", "update", "delete", "purge",
                       "durable", "msg", "get", "next", "direct", "snapshot", "restore"})
"""The JetStream API's words, before a stream's name: upper case, as the server has them."""
_STREAMS = {"events": "EVENTS", "tasks": "TASKS", "bodies": "BODIES"}


def jetstream_cased(subject: str) -> str:
    """A JetStream API subject as the server has it (nats-py lower-cased it: the refusal of
    `muster planners` to a tenant's user read `$js.api.stream.info.kv_leases`): the API's words,
    then the stream's name (`EVENTS`, a bucket's `KV_<bucket>`); what follows (a consumer's name,
    a filter) as it is."""
    parts = subject.split(".")
    if parts[0] == "$kv":
        return ".".join(["$KV", *parts[1:]])
    if parts[0] != "$js":
        return subject
    words = 0
    while words < len(parts) and parts[words] in _JS_WORDS:
        words += 1
    if words < len(parts):  # the stream's name
        stream = parts[words]
        parts[words] = _STREAMS.get(stream, "KV_" + stream[3:] if stream.startswith("kv_") else stream)
    return ".".join([p.upper() for p in parts[:words]] + parts[words:])


def first_refusal(nc: Client) -> str | None:
    """The first permissions violation the server sent this connection (`permissions violation
    for publish to "$js.api.stream.create.events"`), if any: nats-py only reports it to the error
    callback, and the request it refused then times out."""
    refused: str | None = getattr(nc, "_muster_refused", None)
    if refused is None:
        return None
    return re.sub(r'(to ")([^"]+)(")', lambda m: m.group(1) + jetstream_cased(m.group(2)) + m.group(3), refused)


def principal_of(nc: Client) -> str:
    """The principal a connection made by `connect` authenticated as."""
    return str(getattr(nc, "_muster_principal", subjects.ANONYMOUS))


async def connect(url: str | None = None, name: str = "muster", token: str | None = None, data_dir: Path | None = None,
                  **options: Any) -> Client:
    """Without `url` or $NATS_URL, the URL `muster up` saved in `data_dir` (default: $MUSTER_DATA_DIR,
    else ./.muster), as every command finds it; `data_dir` is also where a local CA may be
    (muster.tls.context.client_tls). `options` are nats-py's; its `closed_cb` is called (in a
    task of its own) as the connection starts closing for good, whoever closes it."""
    creds = credentials(token)
    servers = nats_url(url, data_dir if data_dir is not None else default_data_dir()).split(",")
    nc = Client()
    wire.strict_handshake(nc)  # a reconnect is made once the server said PONG, not before

    async def on_error(err: Exception) -> None:
        if "permissions violation" in str(err) and not hasattr(nc, "_muster_refused"):
            nc._muster_refused = str(err).removeprefix("nats: ")  # type: ignore[attr-defined]
        log.warning("nats error", error=(str(err) or type(err).__name__) + plain_to_tls(err, servers))

    async def on_disconnect() -> None:
        if not (nc.is_closed or nc.is_draining):  # our own close is not news
            log.warning("nats disconnected")

    async def on_reconnect() -> None:
        log.info("nats reconnected")
        for listener in list(getattr(nc, "_muster_reconnected", ())):
            _background(listener())

    settings: dict[str, Any] = dict(
        servers=servers,
        name=name,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,
        connect_timeout=5,
        error_cb=on_error,
        disconnected_cb=on_disconnect,
        reconnected_cb=on_reconnect,
        inbox_prefix=subjects.inbox_prefix(creds.principal),
    )
    if creds.token is not None:
        settings["token"] = creds.token
    settings.update(nats_options(servers, data_dir))
    settings.update(options)
    # Called here, once, however nats-py closes the connection for good: it does not always
    # call its own (an -ERR read while reconnecting closes without it; wire.on_closed).
    closed_cb: Callable[[], Awaitable[None]] | None = settings.pop("closed_cb", None)
    try:
        await connect_verified(nc.connect, settings, data_dir)
    except BaseException:
        await wire.close_unconnected(nc)
        raise
    nc._muster_principal = creds.principal  # type: ignore[attr-defined]
    if closed_cb is not None:
        wire.on_closed(nc, lambda: _background(closed_cb()))
    return nc


def on_reconnect(nc: Client, listener: Callable[[], Awaitable[None]]) -> None:
    """Run `listener` (in a task of its own) after each reconnect of a connection made by
    `connect`: what a restarted server may have lost is checked then, not polled for."""
    nc._muster_reconnected = [*getattr(nc, "_muster_reconnected", ()), listener]  # type: ignore[attr-defined]


_running: set[asyncio.Future[None]] = set()


def _background(work: Awaitable[None]) -> None:
    task = asyncio.ensure_future(work)
    _running.add(task)  # held: the loop keeps only weak references to tasks
    task.add_done_callback(_running.discard)


def bearer_headers(token: str | None = None) -> dict[str, str]:
    """HTTP headers that carry the same credentials to the tracker (none without a token)."""
    creds = credentials(token)
    return {"Authorization": f"Bearer {creds.token}"} if creds.token else {}


def auth_required(nc: Client) -> bool:
    """Does the server this connection reached authorize connections (auth on)? Services check
    permissions only then: an open server (benchmarks' baseline) lets anyone say anything."""
    return wire.auth_required(nc)
