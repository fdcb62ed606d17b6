"""What nats-server does during a create, for `scale_bench.py --server-profile`: its own Go CPU
profile (the server's `prof_port`, `/debug/pprof/profile` over HTTP on 127.0.0.1) taken in
back-to-back one-second windows from the meter's start to its stop and summed, and its
monitoring counters (`/varz`, `/jsz`) read before and after: JetStream API calls, connections
made, messages in and out, consumers.

The profile is pprof's gzipped protobuf; no Go toolchain or protobuf package is needed: the
few fields read here (samples, locations, functions, the string table) are decoded by hand.
`summary` sums CPU by function, each function's own (self) and where it is on the stack at all
(cumulative); `python bench/server_profile.py FILE.pb.gz...` prints that for saved profiles.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp

WINDOW_S = 1


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of a protobuf message: an int or the bytes of a
    length-delimited field."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            size, i = _varint(buf, i)
            value, i = buf[i:i + size], i + size
        elif wire == 1:
            value, i = int.from_bytes(buf[i:i + 8], "little"), i + 8
        elif wire == 5:
            value, i = int.from_bytes(buf[i:i + 4], "little"), i + 4
        else:
            raise ValueError(f"protobuf wire type {wire} at byte {i}")
        yield number, wire, value


def _ints(wire: int, value: Any) -> list[int]:
    """A repeated integer field's values: packed (bytes) or one."""
    if wire != 2:
        return [value]
    out, i = [], 0
    while i < len(value):
        v, i = _varint(value, i)
        out.append(v)
    return out


def stacks(data: bytes) -> Counter[tuple[str, ...]]:
    """CPU nanoseconds by stack (leaf first) of one pprof CPU profile (gzipped or not)."""
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    strings: list[str] = []
    functions: dict[int, int] = {}  # function id -> name's string index
    locations: dict[int, list[int]] = {}  # location id -> function ids, innermost first
    samples: list[tuple[list[int], list[int]]] = []
    for number, _wire, value in _fields(data):
        if number == 2:  # Sample: location_id (1), value (2)
            ids: list[int] = []
            values: list[int] = []
            for n, w, v in _fields(value):
                if n == 1:
                    ids += _ints(w, v)
                elif n == 2:
                    values += _ints(w, v)
            samples.append((ids, values))
        elif number == 4:  # Location: id (1), line (4) with function_id (1)
            lid, funcs = 0, []
            for n, _, v in _fields(value):
                if n == 1:
                    lid = v
                elif n == 4:
                    funcs += [fv for fn, _, fv in _fields(v) if fn == 1]
            locations[lid] = funcs
        elif number == 5:  # Function: id (1), name (2)
            fields = {n: v for n, _, v in _fields(value)}
            functions[fields.get(1, 0)] = fields.get(2, 0)
        elif number == 6:
            strings.append(value.decode(errors="replace"))
    out: Counter[tuple[str, ...]] = Counter()
    for ids, values in samples:
        names = tuple(strings[functions.get(f, 0)] for loc in ids for f in locations.get(loc, []))
        out[names] += values[-1] if values else 0  # [samples, cpu ns]: the last is the time
    return out


def summary(profile: Counter[tuple[str, ...]], top: int = 30) -> tuple[float, list[tuple[str, float, float]]]:
    """Total CPU (ms) and the `top` functions by cumulative CPU: (name, self ms, cumulative ms)."""
    own: Counter[str] = Counter()
    cumulative: Counter[str] = Counter()
    for stack, ns in profile.items():
        if stack:
            own[stack[0]] += ns
        for name in set(stack):
            cumulative[name] += ns
    total = sum(profile.values())
    return total / 1e6, [(name, own[name] / 1e6, ns / 1e6) for name, ns in cumulative.most_common(top)]


PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("atomic batch: staging store made", ("newAtomicBatch", "newBatchStore")),
    ("atomic batch: staging store deleted", ("cleanupLocked", "(*batchGroup).cleanup")),
    ("atomic batch: commit (staged messages stored)", ("processJetStreamAtomicBatchMsg",)),
    ("single append stored", ("processJetStreamMsgWithBatch", "processJetStreamMsg")),
    ("consumers (deliveries, acks)", ("(*consumer).",)),
    ("store in the background (flushes, syncs)", ("(*fileStore).", "(*msgBlock).", "(*consumerFileStore).")),
    ("client reads (parse, route)", ("(*client).readLoop", "processInboundClientMsg")),
    ("client writes", ("(*client).writeLoop", "flushOutbound", "flushClients")),
    ("garbage collector", ("runtime.gc", "gcBgMarkWorker", "bgsweep", "bgscavenge")),
    ("monitoring and profiler (HTTP)", ("net/http", "pprof")),
)
"""Where a stack's CPU goes, by the first part (in this order) one of whose names it holds: an
atomic batch on a single-replica file stream is staged in a file store of its own (made for
the batch, deleted at its commit), whatever its size."""


def part_of(stack: tuple[str, ...]) -> str:
    joined = ";".join(stack)
    return next((name for name, keys in PARTS if any(k in joined for k in keys)), "other")


def parts(profile: Counter[tuple[str, ...]]) -> dict[str, float]:
    """CPU ms by part (`PARTS`), most first."""
    out: dict[str, float] = {}
    for stack, ns in profile.items():
        name = part_of(stack)
        out[name] = out.get(name, 0.0) + ns / 1e6
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


class ServerProbe:
    """nats-server's CPU profile and counters from `start()` to `stop()`."""

    def __init__(self, prof_url: str, monitor_url: str) -> None:
        self.prof_url, self.monitor_url = prof_url, monitor_url
        self.profile: Counter[tuple[str, ...]] = Counter()
        self.windows = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._before: dict[str, int] = {}
        self.counters: dict[str, int] = {}

    async def start(self) -> None:
        self._before = await self.read_counters()
        self._stop.clear()
        self._task = asyncio.create_task(self._record())

    async def _record(self) -> None:
        async with aiohttp.ClientSession() as http:
            while not self._stop.is_set():  # each window ends on its own after WINDOW_S
                async with http.get(f"{self.prof_url}/debug/pprof/profile?seconds={WINDOW_S}") as resp:
                    self.profile.update(stacks(await resp.read()))
                self.windows += 1

    async def stop(self) -> None:
        after = await self.read_counters()
        self.counters = {k: v - self._before.get(k, 0) for k, v in after.items()}
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def read_counters(self) -> dict[str, int]:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{self.monitor_url}/varz") as resp:
                varz = await resp.json()
            async with http.get(f"{self.monitor_url}/jsz?accounts=true&consumers=true") as resp:
                jsz = await resp.json()
        api = (varz.get("jetstream") or {}).get("stats", {}).get("api", {})
        out = {"js api calls": int(api.get("total", 0)), "js api errors": int(api.get("errors", 0)),
               "connections made": int(varz.get("total_connections", 0)), "in msgs": int(varz.get("in_msgs", 0)),
               "out msgs": int(varz.get("out_msgs", 0)), "consumers": int(jsz.get("consumers", 0)),
               "streams": int(jsz.get("streams", 0)), "stored msgs": int(jsz.get("messages", 0))}
        for account in jsz.get("account_details", []):
            for stream in account.get("stream_detail", []):
                out[f"consumers {stream.get('name')}"] = len(stream.get("consumer_detail") or [])
        return out


def lines(result: dict[str, Any], tasks: int, top: int = 30) -> list[str]:
    """A create's server profile: total, by part, top functions (ms, µs a task), counters."""
    profile = Counter({tuple(k.split(";")): v for k, v in result["stacks"].items()})
    total, rows = summary(profile, top)
    out = [f"nats-server profile: {total:.0f} ms of CPU in {result['windows']} windows ({1000 * total / max(tasks, 1):.0f} µs a task)",
           "by part: " + ", ".join(f"{name} {ms:.0f} ms" for name, ms in parts(profile).items()),
           "cumulative ms / self ms  function"]
    out += [f"{cum:8.1f} / {own:7.1f}  {name}" for name, own, cum in rows]
    out += ["counters: " + ", ".join(f"{k} {v}" for k, v in result["counters"].items())]
    return out


if __name__ == "__main__":
    merged: Counter[tuple[str, ...]] = Counter()
    for path in sys.argv[1:]:
        merged.update(stacks(Path(path).read_bytes()))
    total_ms, top_rows = summary(merged, 40)
    print(f"{total_ms:.0f} ms")
    for name, own_ms, cum_ms in top_rows:
        print(f"{cum_ms:8.1f} / {own_ms:7.1f}  {name}")
