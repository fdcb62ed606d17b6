"""Snapshots of event-sourced aggregates: their state at a log sequence, to resume from.

Resuming is the snapshot and the events after it, instead of every event since the first; the
log stays the truth and a snapshot is only ever a shortcut to a state the log gives anyway.

A snapshot is JSON: `{format, fingerprint, kind, tenant, id, seq, version, state}`. `seq` is
the log sequence of the aggregate's last event it covers; `state` the aggregate's attributes,
tagged where JSON has no type of its own (sets, tuples, UUIDs, datetimes, enums, named tuples
and frozen dataclasses of muster's own as their fields, and pydantic models as their contract
JSON, validated again when read). Attributes that are caches derived
from the others are left out and start empty (`register(..., derived=...)`).

An old snapshot is ignored, never misread: `fingerprint` is a hash of this format and of the
source of every module the state comes from (the aggregate's package, the contracts of its
events); any change there makes every older snapshot a stranger, and the aggregate is folded
from its first event again (and snapshotted anew). A snapshot whose state does not decode is
ignored the same way. Pure: no IO here (`muster.bus.snapshotstore` keeps them in a KV bucket).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import importlib
import json
import re
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar
from uuid import UUID

from pydantic import BaseModel

from contracts.records import Recorded

FORMAT = 1
_STATE = re.compile(rb',\s*"state"\s*:')
TAG = "~"
"""The key that marks a tagged value; a real dict holding it is tagged too."""
TRUSTED = ("contracts.", "muster.", "services.")
"""Modules a snapshot may name a class of (never anything else: snapshots are data)."""

A = TypeVar("A")


class SnapshotError(Exception):
    """An aggregate whose state cannot be snapshotted, or a snapshot that cannot be read."""


class SnapshotTooLarge(SnapshotError):
    """A snapshot larger than its store takes (the store says how large): not written; the
    aggregate resumes from its events. Aggregates only grow, so it is not tried again."""


@dataclass(frozen=True)
class Kind:
    name: str
    cls: type[Any]
    derived: dict[str, Callable[[], Any]]
    fingerprint: str


_KINDS: dict[str, Kind] = {}


def register(name: str, cls: type[Any], derived: dict[str, Callable[[], Any]] | None = None,
             sources: Iterable[str] = ("contracts.events", "contracts.layout")) -> Kind:
    """Make `cls` snapshottable as `name`. `derived`: attributes that are caches, each with what
    it starts as. The fingerprint covers the source of the class's package and `sources`."""
    derived = {"_pending_events": list, **(derived or {})}
    kind = Kind(name, cls, derived, fingerprint(cls, sources))
    _KINDS[name] = kind
    return kind


def kind_of(name: str) -> Kind:
    try:
        return _KINDS[name]
    except KeyError:
        raise SnapshotError(f"no aggregate registered as {name!r}") from None


def fingerprint(cls: type[Any], sources: Iterable[str]) -> str:
    module = importlib.import_module(cls.__module__)
    files = sorted(Path(module.__file__ or "").parent.glob("*.py"))
    files += [Path(importlib.import_module(name).__file__ or "") for name in sources]
    digest = hashlib.sha256(f"format {FORMAT} {cls.__module__}.{cls.__qualname__}".encode())
    for f in files:
        digest.update(f.name.encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()[:24]


# -- taking and reading ---------------------------------------------------------------------------


def take(kind: Kind, aggregate: Any, tenant: str, seq: int) -> bytes:
    """The snapshot of `aggregate`, which has folded every event of its subject up to `seq`."""
    state = {k: _encode(v, k) for k, v in vars(aggregate).items() if k not in kind.derived}
    record = {"format": FORMAT, "fingerprint": kind.fingerprint, "kind": kind.name, "tenant": tenant,
              "id": str(getattr(aggregate, "id", "")), "seq": seq, "version": getattr(aggregate, "version", None),
              "state": state}
    return json.dumps(record, separators=(",", ":")).encode()  # not sorted: dict order is state too


@dataclass(frozen=True)
class Snapshot:
    kind: str
    tenant: str
    id: str
    seq: int
    aggregate: Any


def read(data: bytes) -> Snapshot | None:
    """The snapshot in `data`, or None if it is of another format or fingerprint, or does not
    decode (then the aggregate is folded from the log instead)."""
    try:
        found = _STATE.search(data, 0, 4096)  # `take` writes the state last: check the rest first
        head = json.loads(data[: found.start()] + b"}") if found else {}
        kind = _KINDS.get(head.get("kind", ""))
        if kind is None or head.get("format") != FORMAT or head.get("fingerprint") != kind.fingerprint:
            return None  # (without decoding the state)
        record = json.loads(data, object_hook=_untag)  # tags undone by the C parser's hook, bottom up
        aggregate = object.__new__(kind.cls)
        aggregate.__dict__.update(record["state"])
        for name, start in kind.derived.items():
            aggregate.__dict__[name] = start()
        return Snapshot(kind.name, record["tenant"], record["id"], int(record["seq"]), aggregate)
    except (ValueError, KeyError, TypeError, SnapshotError):
        return None


def resume(snapshot: Snapshot | None, tail: Iterable[Recorded], fold: Callable[[Any, Recorded], Any]) -> Any:
    """The aggregate: the snapshot (None: nothing) and every event after it folded on top."""
    aggregate = snapshot.aggregate if snapshot is not None else None
    for r in tail:
        if snapshot is None or r.seq > snapshot.seq:
            aggregate = fold(aggregate, r)
    return aggregate


class SnapshotSource(Protocol):
    """Where snapshots are kept (`muster.bus.snapshotstore.SnapshotStore`, or in memory)."""

    async def put(self, kind: str, tenant: str, aggregate_id: str, data: bytes) -> None: ...

    async def get(self, kind: str, tenant: str, aggregate_id: str) -> Snapshot | None:
        """The current snapshot of one aggregate, if it has a readable one."""
        ...

    async def latest(self, kind: str) -> dict[str, Snapshot]:
        """The current readable snapshot of every aggregate of `kind`, by id."""
        ...


class MemorySnapshots:
    """Snapshots in memory (unit tests); every revision kept, the last `history` read."""

    def __init__(self, history: int = 8) -> None:
        self.history = history
        self.data: dict[tuple[str, str, str], list[bytes]] = {}

    async def put(self, kind: str, tenant: str, aggregate_id: str, data: bytes) -> None:
        self.data.setdefault((kind, tenant, aggregate_id), []).append(data)

    async def get(self, kind: str, tenant: str, aggregate_id: str) -> Snapshot | None:
        revisions = self.data.get((kind, tenant, aggregate_id))
        return read(revisions[-1]) if revisions else None

    async def nearest(self, kind: str, tenant: str, aggregate_id: str, at_seq: int | None,
                      fits: Callable[[Snapshot], bool] | None = None) -> Snapshot | None:
        """As `SnapshotStore.nearest`: the highest sequence not after `at_seq` that `fits` takes."""
        found = [s for s in map(read, self.data.get((kind, tenant, aggregate_id), [])[-self.history:])
                 if s is not None and (at_seq is None or s.seq <= at_seq) and (fits is None or fits(s))]
        return max(found, key=lambda s: s.seq, default=None)

    async def latest(self, kind: str) -> dict[str, Snapshot]:
        out = {}
        for (k, _, aggregate_id), revisions in self.data.items():
            snap = read(revisions[-1]) if k == kind else None
            if snap is not None:
                out[aggregate_id] = snap
        return out


# -- the tagged JSON ------------------------------------------------------------------------------


def _topic(cls: type[Any]) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


@functools.lru_cache(maxsize=256)
def _class(topic: str) -> type[Any]:
    module, _, name = topic.partition(":")
    if not module.startswith(TRUSTED):
        raise SnapshotError(f"a snapshot names a class outside muster: {topic}")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, type):
        raise SnapshotError(f"not a class: {topic}")
    return obj


_PLAIN = frozenset({str, int, float, bool, type(None)})
"""Types that stand for themselves in JSON (exactly these: an enum of str is tagged)."""


def _encode(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)) and not isinstance(value, enum.Enum):
        return value
    # (a plain value inside a list, a map or a tuple is taken as it is, without a call: a job's
    # snapshot holds thousands of tasks, states and links)
    if isinstance(value, list):
        return [v if type(v) in _PLAIN else _encode(v, where) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and TAG not in value:
            return {k: v if type(v) in _PLAIN else _encode(v, where) for k, v in value.items()}
        return {TAG: "dict", "v": [[_encode(k, where), _encode(v, where)] for k, v in value.items()]}
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):  # a NamedTuple of muster's own
        # Enum fields as their plain values (the class says which fields they are): a job's
        # thousands of tasks read back without a tag each.
        return {TAG: "data", "t": _topic(type(value)),
                "v": [v if type(v) in _PLAIN else v.value if isinstance(v, enum.Enum) else _encode(v, where) for v in value]}
    if isinstance(value, tuple):
        return {TAG: "tuple", "v": [v if type(v) in _PLAIN else _encode(v, where) for v in value]}
    if isinstance(value, (set, frozenset)):
        items = [_encode(v, where) for v in value]
        try:
            items.sort()
        except TypeError:
            pass
        return {TAG: "set", "v": items}
    if isinstance(value, UUID):
        return {TAG: "uuid", "v": str(value)}
    if isinstance(value, datetime):
        return {TAG: "datetime", "v": value.isoformat()}
    if isinstance(value, BaseModel):
        return {TAG: "model", "t": _topic(type(value)), "v": value.model_dump(mode="json")}
    if isinstance(value, enum.Enum):
        return {TAG: "enum", "t": _topic(type(value)), "v": value.value}
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and type(value).__dataclass_params__.frozen:  # type: ignore[attr-defined]
        return {TAG: "data", "t": _topic(type(value)), "v": [_encode(getattr(value, f.name), where) for f in dataclasses.fields(value)]}
    raise SnapshotError(f"{where}: a {type(value).__name__} cannot be snapshotted (a derived cache? register it as such)")


_DATA: dict[str, Callable[[list[Any]], Any]] = {}
"""A decoder per class of the `data` tag, made once (a job's snapshot holds thousands of tasks)."""


def _data_decoder(topic: str) -> Callable[[list[Any]], Any]:
    cls = _class(topic)
    if dataclasses.is_dataclass(cls):
        def decode(v: list[Any]) -> Any:
            return cls(*v)
    elif issubclass(cls, tuple) and hasattr(cls, "_fields"):
        # Enum fields are stored as their plain values; the class's hints say which they are.
        hints = typing.get_type_hints(cls)
        enums = [(i, hints[f]._value2member_map_) for i, f in enumerate(cls._fields)
                 if isinstance(hints[f], type) and issubclass(hints[f], enum.Enum)]
        make = cls._make  # type: ignore[attr-defined]  # (a named tuple)

        def decode(v: list[Any]) -> Any:
            for i, members in enums:
                if v[i] is not None:
                    v[i] = members[v[i]]
            return make(v)
    else:
        raise SnapshotError(f"not a dataclass or a named tuple: {topic}")
    _DATA[topic] = decode
    return decode


def _untag(value: dict[str, Any]) -> Any:
    tag = value.get(TAG)
    if tag is None:
        return value
    v = value["v"]
    if tag == "dict":
        return {k: x for k, x in v}
    if tag == "tuple":
        return tuple(v)
    if tag == "set":
        return set(v)
    if tag == "uuid":
        return UUID(v)
    if tag == "datetime":
        return datetime.fromisoformat(v)
    if tag == "model":
        model = _class(value["t"])
        if not issubclass(model, BaseModel):
            raise SnapshotError(f"not a model: {value['t']}")
        return model.model_validate(v)
    if tag == "enum":
        return _class(value["t"])(v)
    if tag == "data":
        decode = _DATA.get(value["t"]) or _data_decoder(value["t"])
        return decode(v)
    raise SnapshotError(f"unknown tag {tag!r}")
