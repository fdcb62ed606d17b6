"""A log another (older) muster wrote, loaded into a fresh server as that muster left it
(tests/fixtures/oldlogs/, made by scripts/capture_log_fixture.py; docs/bus.md, "Upgrades").

Each stream is made with the configuration the old code gave it, then its messages are
published again in order, with their subjects, bodies and headers, except the headers that ask
the server to check or group a write (`Nats-Expected-*`, `Nats-Batch-*`): they were checked when
the old code wrote them, and their values would not hold against the new server. The log's
sequence numbers are the old ones (snapshots, replays and saved plans name them): a load that
would shift them stops. The log is loaded before anything of today's muster starts, the auth
service included (which writes to the log at its start), as an upgrade finds it."""

from __future__ import annotations

import base64
import gzip
import json
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import StreamConfig

from contracts import subjects
from muster.bus.server import start_blocking
from services.auth.keys import LOG_USER, AuthKeys, server_auth_config
from tests.conftest import AuthThread, _stop

FIXTURES = Path(__file__).parents[2] / "fixtures" / "oldlogs"
CHECKS = ("Nats-Expected-", "Nats-Batch-")


@dataclass
class OldLog:
    expected: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)
    """The EVENTS messages as the fixture holds them (seq, subject, headers, data)."""

    @property
    def last_seq(self) -> int:
        return int(self.events[-1]["seq"])

    def of(self, subject: str) -> list[dict[str, Any]]:
        return [m for m in self.events if m["subject"] == subject]


def read_fixture(name: str) -> tuple[OldLog, list[dict[str, Any]]]:
    expected = json.loads((FIXTURES / f"{name}.expected.json").read_text())
    with gzip.open(FIXTURES / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    assert docs[0].get("fixture") == "muster-log" and docs[0].get("format") == 1, docs[0]
    old = OldLog(expected, [d for d in docs if d.get("stream") == subjects.EVENTS_STREAM and "seq" in d])
    return old, docs[1:]


async def load(js: JetStreamContext, name: str) -> OldLog:
    old, docs = read_fixture(name)
    for doc in docs:
        if "config" in doc:
            config = dict(doc["config"])
            config.pop("metadata", None)  # the server's own (its version, the API level)
            await js.add_stream(StreamConfig.from_response(config))
            continue
        data = base64.b64decode(doc["b64"]) if "b64" in doc else doc["data"].encode()
        headers = {k: v for k, v in doc["headers"] if not k.startswith(CHECKS)}
        ack = await js.publish(doc["subject"], data, headers=headers or None, stream=doc["stream"])
        if doc["stream"] == subjects.EVENTS_STREAM and ack.seq != doc["seq"]:
            raise AssertionError(f"the loaded log's sequence {ack.seq} is not the old {doc['seq']} ({doc['subject']})")
    return old


async def server_with(data_dir: Path, name: str, exit_stack: AsyncExitStack) -> tuple[str, OldLog]:
    """A nats-server with auth as `muster up` has it, holding the old log `name`; its URL."""
    keys = AuthKeys.load_or_create(data_dir / "auth")
    proc, url = start_blocking(data_dir / "nats", name="muster-old", auth=server_auth_config(keys.issuer_public, keys.bus_secret))
    exit_stack.callback(_stop, proc)
    nc = Client()
    await nc.connect(servers=[url], user=LOG_USER, password=keys.bus_secret)  # the log's account, no callout yet
    try:
        old = await load(nc.jetstream(), name)
    finally:
        await nc.close()
    exit_stack.callback(AuthThread(url, keys).stop)
    return url, old
