"""How many of muster's modules a create request passes through in the planner, from the
request's message to the `LayoutRequested` it appends (a measure of how easy the path is to
follow, not of speed).

    python bench/request_path.py [--list]

One nats-server of its own, a planner started as `muster planner` starts it (`start_planner`:
shards, the catalog verbs, the pools), the demo catalog in the log. One `CreateCluster` is
sent; every call made for it in the planner (the tasks it starts included) is traced with
`sys.setprofile` until the append of its `LayoutRequested` returns. Counted: the modules of
`contracts`, `muster` and `services` whose functions ran (`modules`), and the distinct pairs
(caller's module, callee's module) of different modules (`crossings`), the caller being the
nearest frame of muster's own (a call through pydantic or asyncio counts from the muster code
that made it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import sys
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contracts.commands import CreateCluster
from contracts.events import LayoutRequested
from muster.bus.connect import connect
from muster.bus.eventstore import EventStore
from muster.bus.server import NatsServer
from muster.bus.streams import ensure_streams
from muster.catalog.files import load_catalog
from muster.catalog.store import apply_catalog
from muster.client import MusterClient
from services.planner.config import PlannerConfig
from services.planner.entrypoint import start_planner

DEMO = Path(__file__).resolve().parents[1] / "muster" / "demo" / "catalog"
OURS = ("contracts", "muster", "services")
TRACKED: contextvars.ContextVar[bool] = contextvars.ContextVar("tracked", default=False)


def _module(frame: FrameType) -> str:
    return str(frame.f_globals.get("__name__", ""))


def _ours(name: str) -> bool:
    return name.split(".", 1)[0] in OURS


def _appends_layout_request(frame: FrameType) -> bool:
    if frame.f_code.co_name != "append" or not _module(frame).startswith("muster."):
        return False
    for value in frame.f_locals.values():
        if isinstance(value, list) and any(isinstance(getattr(v, "event", None), LayoutRequested) for v in value):
            return True
    return False


class Trace:
    def __init__(self) -> None:
        self.modules: set[str] = set()
        self.crossings: dict[tuple[str, str], str] = {}
        """(caller's module, callee's module) -> the first function called across it."""
        self.armed = False
        self.end: FrameType | None = None
        self.done = False

    def __call__(self, frame: FrameType, what: str, arg: Any) -> None:
        if self.done:
            return
        if what == "return" and frame is self.end:
            self.done = True
            return
        if what != "call":
            return
        name = _module(frame)
        if not _ours(name):
            return
        if not TRACKED.get():
            # The request's entry: the planner's code called from a subscription's callback.
            if not (self.armed and name.startswith("services.planner") and _under_subscription(frame)):
                return
            TRACKED.set(True)
        self.modules.add(name)
        caller = frame.f_back
        while caller is not None and not _ours(_module(caller)):
            caller = caller.f_back
        if caller is not None and _module(caller) != name:
            self.crossings.setdefault((_module(caller), name), f"{caller.f_code.co_name} -> {frame.f_code.co_qualname}")
        if self.end is None and _appends_layout_request(frame):
            self.end = frame


def _under_subscription(frame: FrameType) -> bool:
    f: FrameType | None = frame
    while f is not None:
        if _module(f).startswith("nats.aio"):
            return True
        f = f.f_back
    return False


async def main(show: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with NatsServer(Path(tmp)) as server, AsyncExitStack() as stack:
            planner_nc = await connect(server.url, name="planner")
            client_nc = await connect(server.url, name="client")
            stack.push_async_callback(client_nc.close)
            stack.push_async_callback(planner_nc.close)
            await ensure_streams(planner_nc.jetstream())
            await apply_catalog(EventStore(client_nc), "default", load_catalog(DEMO))
            await start_planner(planner_nc, stack, PlannerConfig(instance="bench-path", shards=1))
            client = MusterClient(client_nc)
            # One create first: every module is imported and every cache warm before the one traced.
            await client.request(CreateCluster(name="warm", template="hadoop-small", nodes=3))
            trace = Trace()
            sys.setprofile(trace)
            trace.armed = True
            try:
                await client.request(CreateCluster(name="traced", template="hadoop-small", nodes=3))
            finally:
                sys.setprofile(None)
            if not trace.done:
                raise SystemExit("the traced request never appended its LayoutRequested")
    print(f"modules: {len(trace.modules)}")
    print(f"crossings: {len(trace.crossings)}")
    if show:
        print("\n".join(sorted(trace.modules)))
        print("\n".join(f"{a} -> {b}  ({how})" for (a, b), how in sorted(trace.crossings.items())))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="name the modules and the crossings")
    asyncio.run(main(parser.parse_args().list))
