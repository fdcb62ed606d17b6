"""Governance entities in the log: read a tenant's, write a put or a delete (docs/governance.md).

A put is all-or-nothing, like a catalog apply: the entities are validated together against what
the log holds (`domain.entities.plan_puts`), then appended in one atomic batch that carries the
last sequence of the kind's subjects (`muster.evt.<tenant>.gov.<kind>.*`), so a concurrent change
that validated against an older state is refused, never merged. A delete is fenced on the
entity's own subject.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from contracts import subjects
from contracts.governance import GovernanceDeleted, GovernancePut, Schedule
from contracts.records import Append
from muster.ports.eventlog import EventLog

from .domain.deliveries import latest
from .domain.entities import Entry, Put, fold, retired
from .domain.schedules import cluster_gone, cluster_of


async def read_entries(log: EventLog, tenant: str, kind: str = "*") -> tuple[dict[tuple[str, str], Entry], int]:
    """The tenant's entities of `kind` (`*`: all) and the last sequence of their subjects."""
    records = await log.read(subjects.governance_filter(tenant, kind))
    return fold(records), records[-1].seq if records else 0


async def with_deliveries(log: EventLog, tenant: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Subscriptions (`Entry.to_json`) each with its latest notification news (`delivery`): the last
    event of its notification subject, two reads per subscription."""
    out = []
    for item in items:
        subject = subjects.notification_events(tenant, item["name"])
        seq = await log.last_seq(subject)
        records = await log.read(subject, start_seq=seq) if seq else []
        out.append({**item, "delivery": latest(records[-1].event, records[-1].time) if records else None})
    return out


async def with_ends(log: EventLog, tenant: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Schedules (`Entry.to_json`), each whose cluster the log says is deleted shown as ended
    (`ended`, why; `ended_at` null until its end is recorded), not with a next run: it never
    runs again (every operation on a deleted cluster is refused, an id is never used again), and
    its end is recorded at its next tick (docs/governance.md). One read of its cluster's events
    per schedule that has not ended, as a refused tick reads them."""
    out = []
    for item in items:
        try:
            cluster_id = None if item.get("ended") else cluster_of(Schedule.model_validate(item["entity"]))
        except ValidationError:
            cluster_id = None  # (listed as it is: written by an older contract)
        gone = ""
        if cluster_id is not None:
            try:
                gone = cluster_gone(await log.read(subjects.cluster_events(tenant, cluster_id)))
            except subjects.SubjectError:
                gone = ""  # not a cluster id: its ticks are refused for that, and say so
        out.append({**item, "ended": gone, "ended_at": None} if gone else item)
    return out


async def read_for_put(log: EventLog, tenant: str, kind: str) -> tuple[dict[tuple[str, str], Entry], int, dict[tuple[str, str], int]]:
    """`read_entries`, and the last version of every entity of `kind`, deleted ones included."""
    records = await log.read(subjects.governance_filter(tenant, kind))
    return fold(records), records[-1].seq if records else 0, retired(records)


def _digest_id(put: Put) -> str:
    return hashlib.sha256(json.dumps(put.entity, sort_keys=True).encode()).hexdigest()[:16]


async def append_puts(store: EventLog, tenant: str, kind: str, puts: Sequence[Put], expect_seq: int, by: str) -> list[int]:
    """One atomic batch, refused with ConcurrencyError when the kind's subjects moved past
    `expect_seq` (`EventLog.append_fenced`)."""
    entries = [(subjects.governance_events(tenant, p.kind, p.name),
                Append(GovernancePut(kind=p.kind, name=p.name, entity=p.entity, version=p.version, by=by),  # type: ignore[arg-type]
                       # Versions go on across a delete (`read_for_put`): the same entity put again
                       # after its delete is a new id, not a duplicate of its first put.
                       msg_id=f"gov:{tenant}:{p.kind}:{p.name}:v{p.version}:{_digest_id(p)}", version=p.version))
               for p in puts]
    if not entries:
        return []
    return list(await store.append_fenced(entries, expect_seq, subjects.governance_filter(tenant, kind)))


async def append_delete(log: EventLog, tenant: str, entry: Entry, by: str) -> int:
    subject = subjects.governance_events(tenant, entry.kind, entry.name)
    event = GovernanceDeleted(kind=entry.kind, name=entry.name, by=by)  # type: ignore[arg-type]
    seqs = await log.append(subject, [Append(event, msg_id=f"gov:{tenant}:{entry.kind}:{entry.name}:deleted:{entry.seq}")],
                            expect_last_seq=entry.seq)
    return seqs[-1]
