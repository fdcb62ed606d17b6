"""A job's progress as server-sent events: its story from the first event (or after
`Last-Event-ID`), then live until its final event, folded by the read model's JobProgress;
`: keep-alive` comments while nothing happens.

Served at `GET /v1/jobs/{id}/stream` and to the console's job page (docs/tracker.md, "The progress
stream")."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, TypeVar

import structlog
from aiohttp import web

from contracts.events import FENCE_MARKERS
from contracts.records import Recorded, Undecodable
from muster.cancels import next_item
from muster.readmodel.progress import JobProgress

from .app import skipped_json
from .params import METRICS, TRACKER, not_found
from .planner_view import recorded_for
from .still import ALWAYS, Still, end_if_lost

log = structlog.get_logger("muster.tracker")

KEEPALIVE_S = 15.0
T = TypeVar("T")


LIVE: web.AppKey[set[asyncio.Task[Any]]] = web.AppKey("live_streams", set)
"""The handlers' tasks of the streams being served (`stream_response`), ended at shutdown."""


def stream_response(request: web.Request) -> web.StreamResponse:
    """A server-sent events response, its handler's task noted among the app's live streams
    (`LIVE`), which the app's shutdown ends (`end_streams`): a stream has no end of its own, and
    aiohttp waits for a handler still running up to its shutdown timeout (60 s), so a console's
    job page or a `muster events --follow` left open held a stopping tracker until `muster down`
    killed it (its 15 s)."""
    live = request.config_dict.get(LIVE)
    task = asyncio.current_task()
    if live is not None and task is not None:
        live.add(task)
        task.add_done_callback(live.discard)
    return web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def end_streams(app: web.Application) -> None:
    """`on_shutdown`: the live streams' handlers cancelled (each one's `finally` closes what it
    opened); the connections close, and a client that reconnects finds the next tracker."""
    live: set[asyncio.Task[Any]] = app[LIVE]
    for task in list(live):
        task.cancel()


async def deliveries(queue: asyncio.Queue[T], response: web.StreamResponse) -> AsyncIterator[T]:
    """What arrives on `queue`, as it comes; a `: keep-alive` comment to the client after
    KEEPALIVE_S seconds without anything."""
    while True:
        try:
            item = await next_item(queue, KEEPALIVE_S)  # (a cancel a request lost ends the stream here)
        except TimeoutError:
            await response.write(b": keep-alive\n\n")
            continue
        yield item


def sse(event: str, ident: int | None, data: Any) -> bytes:
    head = f"id: {ident}\n" if ident is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data)}\n\n".encode()


async def job_stream(request: web.Request, tenant: str, job_id: str, last_id: int, *, operator: bool = True,
                     still: Still = ALWAYS) -> web.StreamResponse:
    """The progress stream of one job of `tenant`, after log sequence `last_id` (also served to
    the console, which names the tenant from its session). Not for an `operator`: a planner
    is named "a planner" (planner_view.py). `still`: asked before each event (still.py)."""
    tracker, metrics = request.app[TRACKER], request.app[METRICS]
    if not await tracker.job_exists(tenant, job_id):
        return not_found("job", job_id, tenant)
    response = stream_response(request)
    await response.prepare(request)
    metrics.streams.inc()
    try:
        await _stream(response, tracker.follow(tenant, job_id, idle=KEEPALIVE_S), last_id, operator, still)
    except ConnectionError:
        pass  # the client went away
    except Exception:  # the response has started: all that is left is to end it
        log.exception("progress stream failed", job=job_id)
    finally:
        metrics.streams.dec()
    return response


async def _stream(response: web.StreamResponse, events: AsyncGenerator[Recorded | None, None], last_id: int,
                  operator: bool = True, still: Still = ALWAYS) -> None:
    progress = JobProgress()
    async with contextlib.aclosing(events):
        async for recorded in events:
            if await end_if_lost(response, still):
                return
            if recorded is None:
                await response.write(b": keep-alive\n\n")
                continue
            if isinstance(recorded.event, Undecodable):  # not an event: named, and read past
                await response.write(sse("skipped", recorded.seq, skipped_json(recorded)))
                continue
            if not operator:
                recorded = recorded_for(recorded)
            try:
                progress.fold(recorded)
                data = progress.summary(recorded) if recorded.seq > last_id else None  # the client has the others
            except Exception as err:  # a log this reader cannot fold: say so, and stop
                log.exception("cannot fold job event", seq=recorded.seq)
                await response.write(sse("error", recorded.seq, {"message": f"cannot follow the job past seq {recorded.seq}: {err}"}))
                return
            if data is not None and recorded.type not in FENCE_MARKERS:  # the log's, not the story's
                await response.write(sse("progress", recorded.seq, data))
    status = progress.status() or {}
    final = progress.final
    await response.write(sse("end", final.seq if final else None, {
        "state": status.get("state"), "error": status.get("error"), "type": final.type if final else None,
        "counts": status.get("counts", {}),
    }))
