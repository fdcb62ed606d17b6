"""The catalog lives in the log: one subject per entity, one `CatalogEntityPut` per version.

`muster.evt.<tenant>.catalog.<kind>.<name>`; the entity's `version` is its number of puts
(1, 2, ...), whatever the file said. An apply is all-or-nothing:

1. read the tenant's catalog from the log (and the sequence of its last catalog event);
2. merge the incoming entities over it and validate the whole result
   (`validation.py`); an error that the log did not already have blocks the
   apply, and nothing is written;
3. append one event per added or changed entity in a single atomic batch that carries the
   expected last sequence of the whole catalog (`Nats-Expected-Last-Subject-Sequence` with
   `...-Subject: muster.evt.<t>.catalog.>`), so a concurrent apply that validated against an
   older catalog is refused rather than merged.

Running the same apply again changes nothing, so a retry after a lost answer is harmless.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from contracts import subjects
from contracts.catalog import KINDS, Catalog
from contracts.events import CatalogEntityDeleted, CatalogEntityPut
from contracts.limits import MAX_ENTITY_BYTES, check_size, json_size, over_budget
from muster.bus.eventstore import Append, Recorded
from muster.ports.eventlog import ConcurrencyError, EventLog

from .files import CatalogFileError
from .plugins import PluginSpecs
from .problems import Problem
from .validation import validate_catalog

MAX_BATCH = 1000
"""nats-server's limit on messages per atomic batch."""
WRONG_LAST_SEQUENCE = (10071, 10164)


class CatalogRejected(CatalogFileError):
    """The catalog (merged with the log) has errors; nothing was written."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        n = len(self.problems)
        super().__init__(f"catalog not applied: {n} error{'s' if n != 1 else ''}; first: {self.problems[0]}")


class CatalogConflict(CatalogFileError):
    """Someone changed the catalog between our read and our write; nothing was written."""


def catalog_filter(tenant: str) -> str:
    return f"{subjects.EVT}.{subjects.token(tenant, 'tenant')}.catalog.>"


def _body(entity: Any) -> dict[str, Any]:
    """What an entity says, without the version number the log assigns."""
    body = entity.model_dump(mode="json") if not isinstance(entity, dict) else dict(entity)
    body.pop("version", None)
    return body


def _digest(body: dict[str, object]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:24]


def changed_fields(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted paths where two JSON values differ (maps recursively; lists as a whole)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            path = f"{prefix}.{key}" if prefix else str(key)
            if key not in old or key not in new:
                out.append(path)
            else:
                out += changed_fields(old[key], new[key], path)
        return out
    return [] if old == new else [prefix or "(whole entity)"]


# -- reading ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class EntityVersion:
    """One version of one entity, as the log has it."""

    kind: str
    name: str
    version: int
    seq: int
    time: datetime
    by: str
    entity: dict[str, Any]
    changed: tuple[str, ...]
    """Fields changed against the previous version; empty for the first."""
    deleted: bool = False
    """The entity was deleted here (`CatalogEntityDeleted`; `version` is its last put's)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "name": self.name, "version": self.version, "seq": self.seq,
            "time": self.time.isoformat(), "by": self.by, "changed": list(self.changed), "entity": self.entity,
            "deleted": self.deleted,
        }


@dataclass
class CatalogState:
    """The tenant's catalog as of `last_seq` (0 = no catalog event yet)."""

    catalog: Catalog = field(default_factory=Catalog)
    last_seq: int = 0
    versions: dict[tuple[str, str], int] = field(default_factory=dict)


def _history(records: Sequence[Recorded]) -> list[EntityVersion]:
    out: list[EntityVersion] = []
    last: dict[tuple[str, str], dict[str, Any]] = {}
    count: dict[tuple[str, str], int] = {}
    for r in records:
        put = r.event
        if isinstance(put, CatalogEntityDeleted) and (put.kind, put.name) in last:
            key = (put.kind, put.name)
            del last[key]
            out.append(EntityVersion(put.kind, put.name, count[key], r.seq, r.time, put.by, {}, ("(deleted)",), deleted=True))
            continue
        if not isinstance(put, CatalogEntityPut) or put.kind not in KINDS:
            continue
        key = (put.kind, put.name)
        count[key] = count.get(key, 0) + 1
        previous = last.get(key)
        changed = tuple(changed_fields(previous, _body(put.entity))) if previous is not None else ()
        last[key] = _body(put.entity)
        out.append(EntityVersion(put.kind, put.name, count[key], r.seq, r.time, put.by, dict(put.entity), changed))
    return out


async def read_history(store: EventLog, tenant: str) -> list[EntityVersion]:
    """Every version of every catalog entity of the tenant, in log order."""
    return _history(await store.read(catalog_filter(tenant)))


async def read_state(store: EventLog, tenant: str, up_to_seq: int | None = None) -> CatalogState:
    """The catalog as the log has it now, or as it had it at `up_to_seq`."""
    return state_of(await store.read(catalog_filter(tenant), up_to_seq=up_to_seq) if up_to_seq != 0 else [])


def state_of(records: Sequence[Recorded]) -> CatalogState:
    """The catalog after these catalog events (a tenant's, in log order)."""
    return advanced(CatalogState(), records)


def advanced(state: CatalogState, records: Sequence[Recorded]) -> CatalogState:
    """The catalog after `state` and then `records` (the tenant's catalog events after
    `state.last_seq`, in log order), as `state_of` of the whole history gives it: a reader that
    keeps its last state reads only what came since (the planner's, at every request) instead of
    the tenant's whole catalog history. A new state: `state` and its catalog are left as they
    were (a running job may hold that catalog)."""
    if not records:
        return state
    catalog = state.catalog.model_copy(update={kind: dict(state.catalog.entities(kind)) for kind in KINDS})
    versions = dict(state.versions)
    for r in records:
        event = r.event
        if not isinstance(event, CatalogEntityPut | CatalogEntityDeleted) or event.kind not in KINDS:
            continue
        entities = catalog.entities(event.kind)
        if isinstance(event, CatalogEntityDeleted):
            entities.pop(event.name, None)  # (a delete of what is not there changes nothing, as in `_history`)
            continue
        entities[event.name] = KINDS[event.kind].model_validate(event.entity)
        versions[(event.kind, event.name)] = versions.get((event.kind, event.name), 0) + 1  # its puts so far
    return CatalogState(catalog, records[-1].seq, versions)


async def read_catalog(store: EventLog, tenant: str) -> Catalog:
    return (await read_state(store, tenant)).catalog


# -- planning an apply (no IO) ------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    kind: str
    name: str
    action: Literal["add", "change"]
    fields: tuple[str, ...]
    version: int
    """The version this change creates."""
    body: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "action": self.action, "version": self.version, "fields": list(self.fields)}


def plan_changes(state: CatalogState, incoming: Catalog) -> list[Change]:
    """The entities of `incoming` that differ from the log, as the versions they would add."""
    changes = []
    for kind in KINDS:
        for name, entity in sorted(incoming.entities(kind).items()):
            body = _body(entity)
            old = state.catalog.entities(kind).get(name)
            if old is not None and _body(old) == body:
                continue
            version = state.versions.get((kind, name), 0) + 1
            changes.append(
                Change(kind, name, "change" if old is not None else "add",
                       tuple(changed_fields(_body(old), body)) if old is not None else (), version, {**body, "version": version})
            )
    return changes


def merge(base: Catalog, incoming: Catalog) -> Catalog:
    merged = base.model_copy(deep=True)
    for kind in KINDS:
        merged.entities(kind).update(incoming.entities(kind))
    return merged


@dataclass
class ApplyCheck:
    changes: list[Change]
    errors: list[Problem]
    """Errors this apply would introduce: any of them blocks it."""
    warnings: list[Problem]

    @property
    def ok(self) -> bool:
        return not self.errors


def check_apply(
    state: CatalogState,
    incoming: Catalog,
    plugins: PluginSpecs | None,
    sources: dict[tuple[str, str], str] | None = None,
    log_label: str = "log",
) -> ApplyCheck:
    """Validate the catalog the apply would leave; errors the log already had do not block
    (an apply never makes the catalog worse) but are reported as warnings for the entities
    being applied."""
    sources = sources or {}
    before = {p.key() for p in validate_catalog(state.catalog, plugins) if p.is_error}
    after = validate_catalog(merge(state.catalog, incoming), plugins)
    applied = {(k, n) for k in KINDS for n in incoming.entities(k)}

    def located(p: Problem, **update: Any) -> Problem:
        src = sources.get((p.kind, p.name)) or (log_label if p.kind else "")
        return replace(p, source=src, **update)

    errors, warnings = [], []
    for kind, name in sorted(applied):
        body = _body(incoming.entities(kind)[name])
        if check_size("entity", body, MAX_ENTITY_BYTES):
            biggest = max(body, key=lambda k: json_size(body[k]))
            errors.append(located(Problem(kind, name, biggest, over_budget("the entity", json_size(body), MAX_ENTITY_BYTES)
                                          + f" ({biggest} alone is {json_size(body[biggest]):,})")))
    for p in after:
        if p.is_error and p.key() not in before:
            errors.append(located(p))
        elif p.is_error:
            if (p.kind, p.name) in applied:
                warnings.append(located(p, severity="warning", message=f"{p.message} (already so in the log)"))
        elif (p.kind, p.name) in applied:
            warnings.append(located(p))
    return ApplyCheck(plan_changes(state, incoming), errors, warnings)


# -- writing -------------------------------------------------------------------------------------


async def append_changes(store: EventLog, tenant: str, changes: Sequence[Change], expect_seq: int, by: str) -> list[int]:
    """One atomic batch of `CatalogEntityPut`, refused (CatalogConflict) if the tenant's
    catalog moved past `expect_seq`."""
    if not changes:
        return []
    if len(changes) > MAX_BATCH:
        raise CatalogFileError(
            f"{len(changes)} entities changed; the log takes at most {MAX_BATCH} in one atomic write: apply the catalog in parts"
        )
    entries = [(subjects.catalog_events(tenant, c.kind, c.name),
                Append(CatalogEntityPut(kind=c.kind, name=c.name, entity=c.body, by=by),
                       msg_id=f"catalog:{tenant}:{c.kind}:{c.name}:v{c.version}:{_digest(c.body)}", version=c.version))
               for c in changes]
    return await append_fenced(store, tenant, entries, expect_seq, "apply")


async def append_fenced(store: EventLog, tenant: str, entries: Sequence[tuple[str, Append]], expect_seq: int,
                        what: str) -> list[int]:
    """Catalog events, all or none, fenced on the tenant's whole catalog (the event log port's
    `append_fenced`): CatalogConflict if it moved past `expect_seq` while this was checked."""
    try:
        return await store.append_fenced(entries, expect_seq, catalog_filter(tenant))
    except ConcurrencyError:
        raise CatalogConflict(f"the catalog changed while this {what} was being checked; nothing was written: run it again") from None


async def apply_catalog(
    store: EventLog,
    tenant: str,
    catalog: Catalog,
    by: str = "anonymous",
    plugins: PluginSpecs | None = None,
    sources: dict[tuple[str, str], str] | None = None,
) -> int:
    """Validate and append every entity that differs from what the log holds, all or none;
    returns how many were appended. Applying the same catalog twice appends nothing.
    Raises CatalogRejected (with every problem) or CatalogConflict. Plugin fields are checked
    against `plugins`, the registry the caller gives (None: no plugin is known, so only the
    plugin-independent checks run; a credential-looking field is still refused)."""
    state = await read_state(store, tenant)
    check = check_apply(state, catalog, plugins, sources)
    if not check.ok:
        raise CatalogRejected(check.errors)
    await append_changes(store, tenant, check.changes, state.last_seq, by)
    return len(check.changes)
