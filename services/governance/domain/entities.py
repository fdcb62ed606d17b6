"""Governance entities as the log has them, and what a change would write (pure).

`fold` reads a tenant's governance events (`GovernancePut`, `GovernanceDeleted`, a schedule's
`ScheduleFired` and `ScheduleAnswered`) into the current entities. `plan_puts` checks incoming
entities (a policy must compile, a schedule's timing must parse) and returns the versions a put
would add: nothing for an entity that did not change, so sending the same put twice writes
nothing the second time. Every problem is reported at once; any problem blocks the whole put.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from contracts.commands import JOB_VERBS, VERB_OF
from contracts.errors import char_shown, describe_validation_error
from contracts.governance import (
    ENTITY_OF,
    ApprovalRule,
    GovernanceDeleted,
    GovernancePut,
    Policy,
    Schedule,
    ScheduleAnswered,
    ScheduleFired,
    Subscription,
)
from contracts.records import Recorded

from . import stored
from .schedules import ScheduleError, check
from .webhooks import scheme_problem, url_problems


@dataclass
class Entry:
    kind: str
    name: str
    version: int
    entity: dict[str, Any]
    by: str
    created_at: datetime
    """When its first version was written (a schedule's ticks count from it)."""
    updated_at: datetime
    seq: int
    """The last event on its subject (a schedule's ticks included): what its next write fences on."""
    last_tick: datetime | None = None
    """A schedule: the last tick a scheduler took."""
    runs: list[dict[str, Any]] = field(default_factory=list)
    """A schedule: its latest ticks and their outcomes (newest last)."""
    pending: dict[str, Any] | None = None
    """A schedule: the tick taken whose request has no recorded answer yet."""
    ended: str = ""
    """A schedule: why it ended (`ScheduleAnswered.ended`), '' while it runs; no tick is taken after."""
    ended_at: datetime | None = None
    counts_from: datetime | None = None
    """A schedule: when it was last resumed, given another time or another operation. Its ticks
    count from then (or from its last tick, if later): a tick that fell while it was paused, or
    under its old timing, is not one a scheduler missed, and is not run late at the change."""

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "version": self.version, "by": self.by, "entity": self.entity,
                "created_at": self.created_at.isoformat(), "updated_at": self.updated_at.isoformat(),
                "last_tick": self.last_tick.isoformat() if self.last_tick else None, "runs": self.runs[-10:],
                **({"ended": self.ended, "ended_at": self.ended_at.isoformat() if self.ended_at else None,
                    "counts_from": self.counts_from.isoformat() if self.counts_from else None}
                   if self.kind == "schedule" else {})}


RUNS_KEPT = 20
RULE_OPERATIONS = sorted(set(VERB_OF.values()) - JOB_VERBS - {"apply", "extend-lease"})
"""The verbs an approval rule can match: the operations admission judges (a saved plan is judged
as its own operation; a lease extension and job control make no plan)."""


def apply(entries: dict[tuple[str, str], Entry], r: Recorded) -> Entry | None:
    """Fold one event into `entries` ((kind, name) -> the entity now; deleted ones are gone);
    returns the entry it changed (None: a deletion, or an event of no entity)."""
    e = r.event
    if isinstance(e, GovernancePut):
        old = entries.get((e.kind, e.name))
        entry = Entry(e.kind, e.name, e.version, dict(e.entity), e.by, old.created_at if old else r.time, r.time, r.seq,
                      *((old.last_tick, old.runs, old.pending) if old else (None, [], None)))
        if old is not None and same_operation(old.entity, e.entity):
            # Paused, resumed or retimed, an ended schedule stays ended; given another operation
            # (a cluster made again under the same name is another cluster), it runs again.
            entry.ended, entry.ended_at = old.ended, old.ended_at
        if old is not None and e.kind == "schedule":
            entry.counts_from = r.time if restarts_ticks(old.entity, e.entity) else old.counts_from
        entries[(e.kind, e.name)] = entry
        return entry
    if isinstance(e, GovernanceDeleted):
        entries.pop((e.kind, e.name), None)
        return None
    s = entries.get(("schedule", getattr(e, "name", "")))
    if s is None:
        return None
    if isinstance(e, ScheduleFired):
        s.seq, s.last_tick = r.seq, e.tick
        s.pending = {"tick": e.tick.isoformat(), "request_id": e.request_id, "late_s": e.late_s, "skipped": e.skipped}
    elif isinstance(e, ScheduleAnswered):
        s.seq = r.seq
        s.runs = [*s.runs, {"tick": e.tick.isoformat(), "job_id": e.job_id, "rejected": e.rejected,
                            "done": e.done, "at": r.time.isoformat()}][-RUNS_KEPT:]
        if s.pending is not None and s.pending["tick"] == e.tick.isoformat():
            s.pending = None
        if e.ended and not s.ended:
            s.ended, s.ended_at = e.ended, r.time
    return s


def same_operation(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Two versions of a schedule send the same request (one paused, resumed or retimed)."""
    return old.get("verb") == new.get("verb") and old.get("command") == new.get("command")


def restarts_ticks(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """A version of a schedule after which its ticks count anew: resumed, given another time or
    another operation. Before session 32 a resume ran at once, late, the latest tick that fell
    while it was paused (`--missed once`): a `cluster restart` paused through an incident ran
    the moment it was resumed."""
    if new.get("paused"):
        return False
    timing = ("cron", "every_s", "timezone")
    return bool(old.get("paused")) or any(old.get(k) != new.get(k) for k in timing) or not same_operation(old, new)


def fold(records: Iterable[Recorded]) -> dict[tuple[str, str], Entry]:
    entries: dict[tuple[str, str], Entry] = {}
    for r in records:
        apply(entries, r)
    return entries


def retired(records: Iterable[Recorded]) -> dict[tuple[str, str], int]:
    """(kind, name) -> the last version it was put with, deleted entities included: one put
    again after its delete goes on from it, so a version names one source."""
    last: dict[tuple[str, str], int] = {}
    for r in records:
        if isinstance(r.event, GovernancePut):
            last[(r.event.kind, r.event.name)] = r.event.version
    return last


def of_kind(entries: Mapping[tuple[str, str], Entry], kind: str) -> list[Entry]:
    return sorted((e for (k, _), e in entries.items() if k == kind), key=lambda e: e.name)


@dataclass(frozen=True)
class Put:
    kind: str
    name: str
    version: int
    entity: dict[str, Any]
    action: str
    """`add` or `change`."""


_PATTERN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-*?[]!")
"""What a cluster name (`contracts.commands.ID`: letters, digits, '-', '_') or id is made of,
and a shell pattern's `*`, `?` and `[!...]`."""


def _unmatchable(patterns: Sequence[str]) -> str:
    """The first of a rule's or a subscription's cluster patterns that no cluster name or id can
    match, said with the character at fault; '' if none. `prod.*` (a regular expression's
    habit), `wеb` (a Cyrillic `е`) and `<b>x</b>` were stored, and the rule never held: every
    request it was written to hold for ran without an approver (session 37's walk)."""
    for pattern in patterns:
        if not pattern:
            return "'' is empty: no cluster has an empty name (give a name or a pattern such as prod-*)"
        bad = next((ch for ch in pattern if ch not in _PATTERN_CHARS), None)
        if bad is not None:
            shown = pattern if len(pattern) <= 40 else pattern[:37] + "..."
            return (f"{shown!r} can match no cluster: it has {char_shown(bad)}, and a cluster's name and id are letters, "
                    "digits, '-' and '_' (a pattern adds '*', '?' and [...])")
    return ""


def problems_of(kind: str, body: Mapping[str, Any]) -> tuple[Any, list[str]]:
    """The entity parsed, or every problem with it."""
    name = body.get("name")
    label = f"{kind} {name if len(name) <= 40 else name[:37] + '...'!r}" if isinstance(name, str) else kind
    hook = body.get("webhook") if kind == "subscription" else None
    if isinstance(hook, Mapping) and isinstance(hook.get("url"), str) and (unfit := scheme_problem(hook["url"])):
        return None, [f"{label}: webhook.url: {unfit}"]
    try:
        entity = ENTITY_OF[kind].model_validate(body)
    except ValidationError as err:
        return None, [f"{label}: {describe_validation_error(err)}"]
    try:
        if isinstance(entity, Policy):
            compiled, found = stored.problems(entity.name, entity.source)
            if compiled is None:
                return None, found
        elif isinstance(entity, ApprovalRule):
            wrong = [op for op in entity.operations if op not in RULE_OPERATIONS]
            if wrong:
                return None, [f"{label}: operations: {', '.join(map(repr, wrong))} is not an operation a rule can match "
                              f"({', '.join(RULE_OPERATIONS)}): the rule would never match"]
            if unmatched := _unmatchable(entity.clusters):
                return None, [f"{label}: clusters: {unmatched}: the rule would never match"]
        elif isinstance(entity, Schedule):
            check(entity)
        elif isinstance(entity, Subscription) and (unmatched := _unmatchable(entity.clusters)):
            return None, [f"{label}: clusters: {unmatched}: it would never be told of them"]
        elif isinstance(entity, Subscription) and entity.webhook is not None:
            found = url_problems(entity.webhook.url)
            if found:
                return None, [f"{label}: webhook.url: {p}" for p in found]
    except ScheduleError as err:
        return None, [f"{label}: {err}"]
    return entity, []


def plan_puts(entries: Mapping[tuple[str, str], Entry], kind: str, incoming: Sequence[Mapping[str, Any]],
              versions: Mapping[tuple[str, str], int] | None = None) -> tuple[list[Put], list[str]]:
    """The versions a put would write, and every problem that blocks it. `versions`: the last
    version each entity ever had (`retired`), deleted ones included."""
    puts: list[Put] = []
    problems: list[str] = []
    seen: set[str] = set()
    for body in incoming:
        entity, found = problems_of(kind, body)
        problems += found
        if entity is None:
            continue
        if entity.name in seen:
            problems.append(f"{kind} {entity.name!r} is given twice")
            continue
        seen.add(entity.name)
        data = entity.model_dump(mode="json")
        old = entries.get((kind, entity.name))
        if old is not None and old.entity == data:
            continue
        version = old.version if old else (versions or {}).get((kind, entity.name), 0)
        puts.append(Put(kind, entity.name, version + 1, data, "change" if old else "add"))
    return puts, problems
