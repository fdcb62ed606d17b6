"""A stream or KV bucket made with fewer replicas than the deployment's, given them.

`MUSTER_REPLICAS` (3 on a cluster) is what every stream and bucket is made with. One made
before with fewer (by an older version, or by a reader before session 25) keeps them: creating it
again with other settings is refused (10058) and the service binds to it as it is. A bucket with
one replica on a 3-node cluster lives on one node, whose loss stops whatever uses it: for the
presence bucket, every provisioner (none can renew its record, so each one's lease lapses:
docs/decisions/0054). nats-server changes a stream's replicas on an update, so whoever finds it
short updates it (`ensure_replicas`) when authorization is off; when it is on, the auth service
alone may update streams, and does it for every bucket muster makes at its start and at each
one's creation (`BUCKETS`): another service that finds one short says so and uses it as it is,
without asking (its update was refused by nats-server, a permission violation on its connection,
and waited for).

The update sends back the stream's own config as the server gave it (raw JSON, every field,
even one nats-py does not know), only `num_replicas` raised: nothing else of the stream
changes, and several services doing it at once send the same config, which the server applies
once (the others find it as asked). Replicas are never lowered here: a deployment may have made
a stream with more.

Whoever raised them waits (`LEADER_WAIT_S` at most) for the stream's new group to have a leader,
told by its JetStream advisory: until then the stream takes no write (a put sent at once waited
its 5 s out, 6 times of 6 on a 3-node cluster). Its old node stays its only full copy until the
new replicas have caught up from it (a few seconds; nats-server tells of it by no advisory): that
node stopped then, the two new replicas elected no leader for over a minute ("stream is offline").
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import structlog
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext

from .wire import auth_required, connection_of

log = structlog.get_logger("muster.bus")

API = "$JS.API"
STREAM_NOT_FOUND = 10059
UPDATE_TIMEOUT_S = 2.0
"""How long an update is waited for; one that was allowed takes a few milliseconds. Several
services updating the same stream at once: nats-server answers one of them."""

UPDATE_TRIES = 3
"""How many times an update left unanswered, the stream still short after it, is sent: a cluster
that has just formed may still be joining a pair of its nodes again (each closed the other's
route as a duplicate; the next try comes a second later), and an update sent meanwhile waits
its `UPDATE_TIMEOUT_S` out. The same config each time, applied once (docs/testing.md, "Known
intermittent")."""

INFO_TIMEOUT_S = 10.0
"""How long a stream's info is waited for. Unlike an update, it is always answered (the stream's
leader, or "not found"): one not answered in the update's 2 s is a server busy for a moment (a
cluster just formed, making the deployment's streams), not a refusal, and giving up there left the
bucket short until the auth service's next start (docs/testing.md, "Known intermittent")."""

LEADER_WAIT_S = 10.0
"""How long whoever raised a stream's replicas waits for its new group's leader (a few tenths of a
second to a few seconds on a 3-node cluster); past it, said and carried on: writes are retried."""

ELECTED = "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.{stream}"

CREATED = "$JS.EVENT.ADVISORY.STREAM.CREATED.*"
"""The advisories of streams' creation (the auth service looks at each bucket's: a wildcard
takes a whole token, so every stream's, told apart by name)."""

BUCKETS = ("presence", "leases", "snapshots", "nodemaps", "locations", "budgets", "spend")
"""Every KV bucket muster makes (each module's `BUCKET`; tests/unit/bus/test_replicas.py holds
them equal): the auth service gives each the deployment's replicas."""


def kv_stream(bucket: str) -> str:
    return f"KV_{bucket}"


async def _api(js: JetStreamContext, verb: str, stream: str, body: bytes, timeout: float) -> dict[str, Any]:
    msg = await connection_of(js).request(f"{API}.STREAM.{verb}.{stream}", body, timeout=timeout)
    answer: dict[str, Any] = json.loads(msg.data)
    return answer


INFO_TRIES = 3
"""How many times a stream's info is asked before its wait ends in an error. It is always answered
by a server whose routes are whole; a JetStream API request that reaches a node while a fresh
cluster joins a pair of routes again (a duplicate closed, a second to wait) can be dropped
unanswered, as an update can: session 36's `.ci/run` saw a provisioner's INFO go unanswered 10 s
in `test_replicas_auth.py` (docs/testing.md, "Known intermittent")."""


async def _info(js: JetStreamContext, stream: str) -> dict[str, Any]:
    for attempt in range(1, INFO_TRIES + 1):
        try:
            return await _api(js, "INFO", stream, b"", INFO_TIMEOUT_S)
        except NatsTimeout:
            if attempt == INFO_TRIES:
                raise
            log.info("a stream's info went unanswered: asked again", stream=stream, waited_s=INFO_TIMEOUT_S,
                     attempt=attempt)
    raise AssertionError("unreachable")  # (the loop returns or raises)


async def ensure_replicas(js: JetStreamContext, stream: str, want: int, *, timeout: float = UPDATE_TIMEOUT_S,
                          may_update: bool | None = None) -> int | None:
    """The stream given at least `want` replicas if it has fewer; its replicas now (as far as
    this connection knows), None if there is no such stream. `timeout`: the update's (its info
    is waited for `INFO_TIMEOUT_S`). `may_update`: whether this connection may update streams
    (the auth service's may); by default, only when the server authorizes nobody (every other
    service's rights leave updates to the auth service: docs/security.md)."""
    info = await _info(js, stream)
    if "error" in info:
        if info["error"].get("err_code") == STREAM_NOT_FOUND:
            return None
        raise RuntimeError(f"stream {stream}: {info['error'].get('description')}")
    config: dict[str, Any] = info["config"]
    have = int(config.get("num_replicas") or 1)
    if have >= want:
        return have
    if not (may_update if may_update is not None else not auth_required(connection_of(js))):
        log.warning("a stream has fewer replicas than the deployment's; the auth service gives them (at its start, or "
                    "when the stream is made): used as it is meanwhile", stream=stream, replicas=have, want=want)
        return have
    config["num_replicas"] = want
    elected = asyncio.Event()

    async def seen(_: Msg) -> None:
        elected.set()

    # Subscribed before the update: the new group's leader, elected after it, cannot be missed.
    sub = await connection_of(js).subscribe(ELECTED.format(stream=stream), cb=seen)
    try:
        have = await _update(js, stream, config, have, want, timeout)
        if have >= want:
            await _led(js, stream, elected)
        return have
    finally:
        await sub.unsubscribe()


async def _update(js: JetStreamContext, stream: str, config: dict[str, Any], have: int, want: int,
                  timeout: float) -> int:
    for attempt in range(1, UPDATE_TRIES + 1):
        try:
            answer = await _api(js, "UPDATE", stream, json.dumps(config).encode(), timeout)
            break
        except NatsTimeout:
            # Not answered: an update sent while another service's raised them (nats-server
            # answers one of several at once; the others' wait runs out, as seen on a 3-node
            # cluster), one lost while the cluster's routes were joined again, or one this
            # connection may not make after all: what the stream has now tells which.
            now = await _info(js, stream)
            have = int(now.get("config", {}).get("num_replicas") or have)
            if have >= want:
                return have
            if attempt == UPDATE_TRIES:
                log.warning("a stream has fewer replicas than the deployment's and this connection may not update it "
                            "(the auth service does at its start)", stream=stream, replicas=have, want=want,
                            tries=UPDATE_TRIES)
                return have
    if "error" in answer:
        log.warning("a stream's replicas could not be raised: used as it is", stream=stream, replicas=have, want=want,
                    error=answer["error"].get("description"))
        return have
    log.info("a stream made with fewer replicas than the deployment's was given them", stream=stream, replicas=have,
             want=want)
    return want


async def _led(js: JetStreamContext, stream: str, elected: asyncio.Event) -> None:
    """Returns once the stream has a leader: its advisory seen, or its info names one (elected
    before this connection subscribed: another service's update landed first)."""
    if elected.is_set():
        return
    info = await _info(js, stream)
    if "cluster" not in info or (info["cluster"] or {}).get("leader"):
        return
    try:
        await asyncio.wait_for(elected.wait(), LEADER_WAIT_S)
    except TimeoutError:
        log.warning("a stream given more replicas has no leader yet: it takes no write until it has",
                    stream=stream, waited_s=LEADER_WAIT_S)


async def replicate_buckets(js: JetStreamContext, want: int) -> dict[str, int | None]:
    """Every bucket of `BUCKETS` that exists given `want` replicas (the auth service's start);
    a failure is told and the others are still done."""
    done: dict[str, int | None] = {}
    for bucket in BUCKETS:
        try:
            done[bucket] = await ensure_replicas(js, kv_stream(bucket), want, may_update=True)
        except Exception as err:  # noqa: BLE001 - told; its next start (or creation) tries again
            log.warning("a bucket's replicas could not be checked", bucket=bucket, error=str(err) or type(err).__name__)
    return done
