"""Where a run's CPU, bus messages and memory go, per process and per kind (`scale_bench.py`).

- **Messages by kind**: a wiretap subscribed to `>` with a system token counts every message of
  the account once, as the server routes it (a publish, its JetStream ack, each delivery of a
  consumer, each ack of a delivery, each KV write), by what it is: `evt.<aggregate>` for a
  publish to the log, `deliver <consumer>` for a consumer's delivery (its reply subject is the
  consumer's `$JS.ACK...`), `ack <consumer>` for an ack, `reply -> <principal>` for a JetStream
  ack or any other answer reaching a principal's inbox, `kv <bucket>`, `task` for the task
  queue, `pull` for a worker's pull request, `js api <verb> (<principal>)` for any other call of
  the JetStream API (a direct get, a consumer made, a stream's info) and who made it. Messages of the auth callout (another account) and
  the wiretap's own are not in it.
- **Stores**: each publish to the log or the task queue by writer and how the server stores it
  (`write_of`: an atomic batch, counted once on its commit, and the messages in it; a single
  append or a chain's link).
- **Messages per connection**: the server's own counters (`/connz`, in_msgs / out_msgs and
  bytes per connection, by connection name), read before and after: what each service sent and
  was sent, counted by the server.
- **CPU**: user + system time of each process (`/proc/<pid>/stat`), before and after.
- **Memory**: each process's high-water mark of resident memory (`VmHWM`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections import Counter
from pathlib import Path

import aiohttp

TICK = os.sysconf("SC_CLK_TCK")


def kind_of(subject: str, reply: str) -> str:
    """What a message is, for the count by kind (see the module's docstring)."""
    parts = subject.split(".")
    if reply.startswith("$JS.ACK."):
        return f"deliver {_consumer(reply.split('.'))}"
    if parts[0] == "muster":
        if parts[1] == "evt" and len(parts) > 3:
            if _marker(parts):
                return "evt.job.steps (claim markers)"
            return f"evt.{parts[3]}" + (".tasks" if parts[3] == "job" and parts[-1] == "tasks" else "")
        return ".".join(parts[:2])
    if parts[0] == "$JS" and len(parts) > 3 and parts[1] == "ACK":
        return f"ack {_consumer(parts)}"
    if parts[0] == "$JS" and len(parts) > 3 and "API" in parts[1:3]:  # `$JS.API.…`, or `$JS.<domain>.API.…`
        api = parts[parts.index("API", 1) + 1:]
        if api[:3] == ["CONSUMER", "MSG", "NEXT"]:
            return "pull"
        asker = f" ({reply.split('.')[1]})" if reply.startswith("_INBOX.") and reply.count(".") > 1 else ""
        return f"js api {'.'.join(api[:2]).lower()}{asker}"
    if parts[0] == "$KV":
        return f"kv {parts[1]}"
    if parts[0] == "_INBOX":
        return f"reply -> {parts[1]}"
    return parts[0]


def _marker(parts: list[str]) -> bool:
    """A claim's marker (`StepOpened`, a provisioner's: `muster.evt.<t>.job.<job>.steps.<task>.<attempt>.<pid>`,
    docs/decisions/0059), not the planner's job events."""
    return len(parts) == 9 and parts[3] == "job" and parts[5] == "steps"


def write_of(subject: bytes, headers: bytes) -> list[str]:
    """A publish to the log or the task queue as the server stores it, for `Wiretap.writes`:
    `<writer> batches` once per atomic batch (on its commit) and `<writer> batched` per message
    in one, or `<writer> singles` (a single append or a chain's link). The writer: a
    provisioner (its id ends a task event's subject), `planner` for the job's records and the
    task queue, else the aggregate."""
    parts = subject.split(b".")
    if parts[0] == b"muster" and parts[1] == b"task":
        writer = "planner tasks"
    elif (len(parts) > 3 and parts[3] == b"task") or _marker([p.decode() for p in parts]):
        writer = "provisioners"
    elif len(parts) > 3 and parts[3] == b"job":
        writer = "planner job"
    else:
        writer = parts[3].decode() if len(parts) > 3 else subject.decode()
    if b"Nats-Batch-Id" not in headers:
        return [f"{writer} singles"]
    return [f"{writer} batched", f"{writer} batches"] if b"Nats-Batch-Commit" in headers else [f"{writer} batched"]


_TYPE = re.compile(rb"Muster-Type: *([^\r\n]+)")
_BATCH = re.compile(rb"Nats-Batch-Id: *([^\r\n]+)")


def _traced(subject: bytes, headers: bytes) -> tuple[float, str, str, str, bool]:
    kind = write_of(subject, headers)[-1].rsplit(" ", 1)[0]
    found, batch = _TYPE.search(headers), _BATCH.search(headers)
    return (time.perf_counter(), kind, found.group(1).decode() if found else "", batch.group(1).decode() if batch else "",
            b"Nats-Batch-Commit" in headers)


def stores_of(trace: list[tuple[float, str, str, str, bool]]) -> list[dict[str, object]]:
    """A `Wiretap.trace` as the server's stores, in the order of their first message: an
    atomic batch is one (its first message's time, its size and event types), a single append
    or a chain's link one each. The writer: `provisioners` split into `claims` and `outcomes`."""
    start = trace[0][0] if trace else 0.0
    stores: list[tuple[int, dict[str, object]]] = []
    batches: dict[tuple[bool, str], tuple[int, dict[str, object], Counter[str]]] = {}
    for i, (at, writer, kind, batch, commit) in enumerate(trace):
        if writer == "provisioners":
            writer = "claims" if kind == "TaskClaimed" else "outcomes"
        store = {"ms": round(1000 * (at - start), 1), "writer": writer, "batch": bool(batch), "n": 1}
        if not batch:
            stores.append((i, {**store, "types": {kind: 1}}))
            continue
        # A batch may span subjects (a wave's cluster and job events, decision 45): one store,
        # named by its first message's writer; the task queue's batches are another stream's.
        key = (writer == "planner tasks", batch)
        first, opened, types = batches.setdefault(key, (i, store, Counter()))
        types[kind] += 1
        if commit:
            del batches[key]
            stores.append((first, {**opened, "n": sum(types.values()), "types": dict(types)}))
    return [store for _, store in sorted(stores, key=lambda s: s[0])]


def _consumer(ack: list[str]) -> str:
    """`<consumer>` of a `$JS.ACK.<stream>.<consumer>...` subject; an ordered consumer (a
    generated name) as `<stream> (ordered)`."""
    stream, consumer = (ack[2], ack[3]) if len(ack) == 9 else (ack[4], ack[5])
    return f"{stream} (ordered)" if len(consumer) == 8 and "-" not in consumer and consumer != consumer.lower() else consumer


class Wiretap:
    """Every message of the account, by kind: count, bytes (body + header block) and the largest."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self.bytes: Counter[str] = Counter()
        self.largest: tuple[int, str] = (0, "")
        self._acked = asyncio.Event()
        self._balanced = asyncio.Event()
        self._owed: Counter[str] = Counter()  # durable consumer -> deliveries not yet acked
        self._kv_seen: set[str] = set()  # subjects of KV writes (a snapshot written after a job ended)
        self._kv_waits: dict[str, asyncio.Future[None]] = {}
        self.writes: Counter[str] = Counter()
        """Stores of the log and the task queue by writer and how (`write_of`): what nats-server
        pays for apart from the messages themselves (an atomic batch ~1.1 ms of its CPU, a single
        append one disk sync)."""
        self.trace: list[tuple[float, str, str, str, bool]] | None = None
        """With `trace_stores()`: every publish to the log or the task queue as (time, writer,
        event type, batch id, whether it commits its batch), for `stores_of`."""

        self.messages: list[tuple[float, str, str, str, int]] | None = None
        """With `trace_messages()`: every message of the account as (time, kind, subject, event
        type, bytes): a small create's whole sequence, for where its fixed cost goes."""

    def trace_stores(self) -> None:
        self.trace = []

    def trace_messages(self) -> None:
        self.messages = []

    async def activity(self, at_most: float = 1.0) -> None:
        """Until the next ack of a delivery passes (or `at_most` seconds)."""
        self._acked.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._acked.wait(), at_most)

    async def balanced(self, at_most: float = 1.0) -> None:
        """Until an ack leaves every durable consumer with each delivery it was given acked
        (or `at_most` seconds): the moment worth asking the server whether all caught up,
        rather than after every ack (each question is bus traffic and server CPU that the
        figures would count)."""
        self._balanced.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._balanced.wait(), at_most)

    async def seen(self, subject: str, at_most: float) -> None:
        """Until a KV write on `subject` has passed since the last reset."""
        if subject not in self._kv_seen:
            waiting = self._kv_waits.setdefault(subject, asyncio.get_running_loop().create_future())
            await asyncio.wait_for(asyncio.shield(waiting), at_most)

    def on_raw(self, subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
        """Taken from the connection's read loop as raw frames (`muster.bus.wire`): the
        wiretap's own CPU per message is a few µs, not nats-py's `Msg` and callback task."""
        kind = kind_of(subject.decode(), reply.decode())
        if kind.startswith("ack "):
            self._acked.set()
            self._owed[kind[4:]] -= 1
            if all(n <= 0 for n in self._owed.values()):
                self._balanced.set()
        elif kind.startswith("deliver ") and not kind.endswith("(ordered)"):
            self._owed[kind[8:]] += 1
        elif kind.startswith("kv "):
            name = subject.decode()
            self._kv_seen.add(name)
            waiting = self._kv_waits.pop(name, None)
            if waiting is not None and not waiting.done():
                waiting.set_result(None)
        if kind.startswith(("evt.", "muster.task")) and not reply.startswith(b"$JS.ACK."):
            for key in write_of(subject, headers):
                self.writes[key] += 1
            if self.trace is not None:
                self.trace.append(_traced(subject, headers))
        size = len(data) + len(headers)
        if self.messages is not None:
            found = _TYPE.search(headers)
            self.messages.append((time.perf_counter(), kind, subject.decode(), found.group(1).decode() if found else "", size))
        self.count[kind] += 1
        self.bytes[kind] += size
        if size > self.largest[0]:
            self.largest = (size, subject.decode())

    def reset(self) -> None:
        self.writes.clear()
        self._kv_seen.clear()
        self.count.clear()
        self.bytes.clear()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def peak_rss_mb(pid: int) -> float:
    """The process's high-water mark of resident memory (VmHWM), in MB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


async def connections(monitor_url: str) -> dict[str, Counter[str]]:
    """The server's counters per connection name (`/connz`): in/out messages and bytes, summed
    over the connections of one name (a service's main connection and its helpers)."""
    async with aiohttp.ClientSession() as http, http.get(f"{monitor_url}/connz?limit=10000") as resp:
        body = await resp.json()
    out: dict[str, Counter[str]] = {}
    for c in body.get("connections", []):
        name = c.get("name") or "(unnamed)"
        counter = out.setdefault(name, Counter())
        for field in ("in_msgs", "out_msgs", "in_bytes", "out_bytes"):
            counter[field] += int(c.get(field, 0))
    return out


def delta(after: dict[str, Counter[str]], before: dict[str, Counter[str]]) -> dict[str, dict[str, int]]:
    """Per connection name, what changed between two `/connz` reads (connections that left in
    between are not in the second read: the services here stay connected)."""
    return {name: {k: v - before.get(name, Counter())[k] for k, v in counts.items()} for name, counts in after.items()}


class Meter:
    """CPU of named processes between `start()` and `stop()`."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.before: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    def start(self) -> None:
        self.before = {name: cpu_seconds(pid) for name, pid in self.pids.items()}

    def stop(self) -> dict[str, float]:
        self.cpu = {name: cpu_seconds(pid) - self.before.get(name, 0.0) for name, pid in self.pids.items()}
        return self.cpu

    def peaks(self) -> dict[str, float]:
        return {name: peak_rss_mb(pid) for name, pid in self.pids.items()}
