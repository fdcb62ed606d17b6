"""A provisioner's pull consumer, read from the wire: a task reaches its worker in the
connection's read loop, not through nats-py's `fetch`.

The dispatch latency (a task queued -> its claim in the log) is spent mostly between a task's
message arriving on the connection and its claim leaving: `fetch`
builds a `Msg`, queues it for a task made for each message it waits for (and for the status
that ends the request), and returns the list only then; the worker then starts a task per
message. Here the pull requests are sent by hand, as the JetStream protocol has them (a JSON
request on `$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>`, our inbox as the reply), and each
delivery goes to `on_msg` synchronously from the read loop (`muster.bus.wire`), as its reply
subject and payload (the worker answers it through `muster.bus.wire.settle`).
docs/benchmarks.md, "Provisioner dispatch", has the figures.

A request asks for up to `batch` tasks and waits up to `wait_s` for the first (`no_wait` with
`expires`): the server delivers what is there, then ends the request with a status (404/408),
or ends it silently when `batch` came. Statuses the worker acts on come back as the errors
nats-py's `fetch` raises for them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import structlog
from nats.aio.client import Client
from nats.errors import TimeoutError as NatsTimeout
from nats.js.errors import APIError, NotFoundError, ServiceUnavailableError

from contracts import subjects
from muster.bus.protocol import parse_headers
from muster.bus.wire import raw_subscribe, raw_unsubscribe

log = structlog.get_logger("muster.provisioner")

FETCH_WAIT_S = 5.0
"""How long one pull waits on the server for a task. It returns as soon as one arrives; the
renewal only bounds how long a pull lost with a broken connection goes unnoticed."""
MAX_BATCH = 256
"""The most tasks one pull asks for."""
MAX_PAUSE_S = 10.0
"""The longest pause of a puller after the bus failed it (it doubles from 0.5 s)."""
ENDS_QUIETLY = ("404", "408", "409")
"""No messages, the request expired, or it was cut (a leader change, too many waiting): ask again."""
HEARTBEAT = "100"
LOST_AFTER_S = 1.0
"""A request whose end did not come this long after its expiry was lost (a broken connection)."""


class RawPull:
    def __init__(self, nc: Client, stream: str, durable: str, on_msg: Callable[[bytes, bytes, bytes], None]) -> None:
        self.nc, self.on_msg = nc, on_msg
        self.next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self.inbox = nc.new_inbox()
        self.sub: Any = None
        self._ended: asyncio.Future[int] | None = None
        self._wanted = 0
        self._got = 0

    async def start(self) -> None:
        self.sub = await raw_subscribe(self.nc, self.inbox, self._frame)

    async def stop(self) -> None:
        """Without the subscription a waiting request has no interest: the server drops it."""
        if self.sub is not None:
            await raw_unsubscribe(self.nc, self.sub)
            self.sub = None

    async def pull(self, batch: int, wait_s: float) -> int:
        """Ask for up to `batch` tasks; return how many came once the request ended (each went
        to `on_msg` as it came). 0 after `wait_s` with nothing. Raises as `fetch` would for a
        consumer that is gone or a stream without a leader."""
        ended: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._ended, self._wanted, self._got = ended, batch, 0
        request = {"batch": batch, "expires": int(wait_s * 1e9), "no_wait": True}
        await self.nc.publish(self.next_subject, json.dumps(request).encode(), reply=self.inbox)
        try:
            return await asyncio.wait_for(asyncio.shield(ended), wait_s + LOST_AFTER_S)
        except TimeoutError:
            raise NatsTimeout from None  # lost with the connection: ask again
        finally:
            if self._ended is ended:
                self._ended = None  # a late end of this request changes nothing

    def _frame(self, subject: bytes, reply: bytes, data: bytes, header_block: bytes) -> None:
        status = ""
        if header_block.startswith(b"NATS/1.0 "):  # a status, not a task (a task's headers have none)
            status, headers = parse_headers(header_block)
        if status:
            if status != HEARTBEAT:
                self._end(status, headers.get("Description", ""))
            return None
        self._got += 1
        self.on_msg(reply, data, header_block)
        if self._got >= self._wanted:
            self._end("", "")  # the batch is full: the server ends the request without a word
        return None

    def _end(self, status: str, description: str) -> None:
        ended = self._ended
        if ended is None or ended.done():
            return  # the end of a request given up on (a late status)
        if not status or status in ENDS_QUIETLY:
            ended.set_result(self._got)
        elif status == "503":
            ended.set_exception(ServiceUnavailableError(code=503, description=description or "no responders"))
        else:
            ended.set_exception(APIError(code=int(status) if status.isdigit() else None, description=description))


class Pulls:
    """The queues a worker serves: for each tenant, its pull and the task that keeps it asking
    (`keep_pulling`), its queue declared first. `on_msg(tenant, reply, payload, header block)`
    gets each delivery."""

    def __init__(self, nc: Client, provisioner_class: str, on_msg: Callable[[str, bytes, bytes, bytes], None],
                 wanted: Callable[[], int], may_pull: asyncio.Event, draining: asyncio.Event,
                 declare: Callable[[str], Awaitable[None]]) -> None:
        self.nc, self.provisioner_class, self.on_msg, self._declare = nc, provisioner_class, on_msg, declare
        self.wanted, self.may_pull, self.draining = wanted, may_pull, draining
        self.served: dict[str, tuple[RawPull, asyncio.Task[None]]] = {}
        self.declared: set[str] = set()

    async def declare(self, tenant: str) -> None:
        await self._declare(tenant)
        self.declared.add(tenant)

    async def serve(self, tenant: str) -> None:
        if tenant not in self.declared:
            await self.declare(tenant)
        durable = subjects.task_consumer(tenant, self.provisioner_class)
        pull = RawPull(self.nc, subjects.TASKS_STREAM, durable, partial(self.on_msg, tenant))
        await pull.start()
        puller = asyncio.create_task(keep_pulling(pull, tenant, self.wanted, self.may_pull, self.draining,
                                                  partial(self.declare, tenant)), name=f"pull-{tenant}")
        self.served[tenant] = (pull, puller)

    async def let_go(self, tenant: str) -> None:
        pull, puller = self.served.pop(tenant)
        puller.cancel()
        await asyncio.gather(puller, return_exceptions=True)
        await pull.stop()  # without its subscription a waiting pull has no interest: the server drops it


async def keep_pulling(pull: RawPull, tenant: str, wanted: Callable[[], int], may_pull: asyncio.Event,
                       draining: asyncio.Event, redeclare: Callable[[], Awaitable[None]]) -> None:
    """Pull while `may_pull` is set, as many as `wanted()`, until `draining`; after a failure of
    the bus, pause (doubling), and declare the queue again if it is gone."""
    failures = 0
    # Not `while True`: a cancel that lands inside a pull can be lost (as the pull times out;
    # Python 3.11's wait_for), and the loop would pull on and keep the drain waiting.
    while not draining.is_set():
        await may_pull.wait()
        want = min(wanted(), MAX_BATCH)
        if want <= 0:
            continue
        asked = asyncio.get_running_loop().time()
        try:
            got = await pull.pull(want, FETCH_WAIT_S)
        except NatsTimeout:
            continue
        except Exception as err:  # noqa: BLE001 - the bus failed us: pause, then ask again
            failures += 1
            await _pause(failures, draining, "task pull failed", tenant, err)
            if isinstance(err, (NotFoundError, ServiceUnavailableError)):  # deleted, or no leader yet
                try:
                    await redeclare()
                except Exception as again:  # noqa: BLE001 - the next pull will tell
                    log.warning("task queue declaration failed", tenant=tenant, error=str(again) or type(again).__name__)
            continue
        if got:
            failures = 0
        elif asyncio.get_running_loop().time() - asked < FETCH_WAIT_S / 2:
            # A status ended the request early with nothing (no leader, a request cut): do not
            # ask again at once, or the loop would spin until the server is back.
            failures += 1
            await _pause(failures, draining, "task pull ended empty", tenant, None)


async def _pause(failures: int, draining: asyncio.Event, what: str, tenant: str, err: BaseException | None) -> None:
    seconds = min(0.5 * 2 ** (failures - 1), MAX_PAUSE_S)
    log.warning(what, tenant=tenant, retry_in_s=seconds, **({"error": str(err) or type(err).__name__} if err else {}))
    try:
        await asyncio.wait_for(draining.wait(), seconds)
    except TimeoutError:
        pass
