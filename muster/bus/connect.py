"""One way to connect to NATS, with reconnects that never give up while a service runs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import structlog
from nats.aio.client import Client

log = structlog.get_logger("muster.bus")

DEFAULT_URL = "nats://127.0.0.1:4222"


def saved_url(data_dir: Path | None, name: str) -> str | None:
    """A URL `muster up` saved in its data folder (`nats.url`, `tracker.url`), if any."""
    if data_dir is None or not (data_dir / name).is_file():
        return None
    return (data_dir / name).read_text().strip() or None


def nats_url(explicit: str | None = None, data_dir: Path | None = None) -> str:
    """The one way to find NATS: the URL given, else $NATS_URL, else the one `muster up` saved
    in `data_dir`, else the local default. Services and commands alike."""
    return explicit or os.environ.get("NATS_URL") or saved_url(data_dir, "nats.url") or DEFAULT_URL


async def connect(url: str | None = None, name: str = "muster", **options: Any) -> Client:
    nc = Client()

    async def on_error(err: Exception) -> None:
        log.warning("nats error", error=str(err) or type(err).__name__)

    async def on_disconnect() -> None:
        if not (nc.is_closed or nc.is_draining):  # our own close is not news
            log.warning("nats disconnected")

    async def on_reconnect() -> None:
        log.info("nats reconnected")

    settings: dict[str, Any] = dict(
        servers=nats_url(url).split(","),
        name=name,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,
        connect_timeout=5,
        error_cb=on_error,
        disconnected_cb=on_disconnect,
        reconnected_cb=on_reconnect,
    )
    settings.update(options)
    await nc.connect(**settings)
    return nc
