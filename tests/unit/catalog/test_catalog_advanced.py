"""A tenant's catalog folded from where a reader left it (`store.advanced`) is the fold of its
whole history, and the planner reads only what came since its last read (`LogCatalogs`)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from contracts.catalog import KINDS, Catalog
from contracts.events import CatalogEntityDeleted, CatalogEntityPut, JobRequested
from muster.catalog.store import CatalogState, _history, advanced, catalog_filter, state_of
from muster.ports.eventlog import Append, Recorded
from muster.ports.memory import MemoryEventLog
from services.planner.state import LogCatalogs

ENTITIES = {
    "services": lambda name, n: {"name": name, "description": f"v{n}"},
    "hardwaretypes": lambda name, n: {"name": name, "description": f"v{n}", "providers": {"sim": {"flavor": f"f{n}"}}},
    "imagetypes": lambda name, n: {"name": name, "description": f"v{n}", "providers": {"sim": {"image": f"i{n}"}}},
}


class CountingLog(MemoryEventLog):
    """The in-memory log, counting the events its reads hand out."""

    def __init__(self) -> None:
        super().__init__()
        self.handed = 0

    async def read(self, subject_filter: str, start_seq: int = 1, up_to_seq: int | None = None) -> list[Recorded]:
        found = await super().read(subject_filter, start_seq, up_to_seq)
        self.handed += len(found)
        return found


async def _history_of(rng: random.Random, log: MemoryEventLog, tenant: str, length: int) -> None:
    """Puts, puts again, deletes (of what is there and of what is not) on a few names."""
    for i in range(length):
        kind = rng.choice(sorted(ENTITIES))
        name = rng.choice(["a", "b", "c"])
        event: Any = CatalogEntityDeleted(kind=kind, name=name) if rng.random() < 0.25 else \
            CatalogEntityPut(kind=kind, name=name, entity=ENTITIES[kind](name, i))
        await log.append(f"muster.evt.{tenant}.catalog.{kind}.{name}", [Append(event, msg_id=f"{tenant}.{i}")])


def _as_history_reads_it(records: Sequence[Recorded]) -> CatalogState:
    """The catalog as `muster catalog history` (`_history`) numbers its versions: the reference."""
    state = CatalogState(last_seq=records[-1].seq if records else 0)
    for v in _history(records):
        if v.deleted:
            state.catalog.entities(v.kind).pop(v.name, None)
        else:
            state.catalog.entities(v.kind)[v.name] = KINDS[v.kind].model_validate(v.entity)
            state.versions[(v.kind, v.name)] = v.version
    return state


def _same(a: CatalogState, b: CatalogState) -> bool:
    return (a.catalog.model_dump(), a.last_seq, a.versions) == (b.catalog.model_dump(), b.last_seq, b.versions)


async def test_a_catalog_advanced_from_any_cut_of_its_history_is_the_fold_of_the_whole_history() -> None:
    for seed in range(25):
        rng = random.Random(seed)
        log = MemoryEventLog()
        await _history_of(rng, log, "t", rng.randint(1, 30))
        await log.append("muster.evt.t.job.j", [Append(JobRequested.model_construct(), msg_id="other")])  # (not the catalog's)
        records = await log.read(catalog_filter("t"))
        whole = _as_history_reads_it(records)
        assert _same(state_of(records), whole)
        for cut in range(len(records) + 1):
            before = state_of(records[:cut])
            kept = before.catalog.model_dump()
            assert _same(advanced(before, records[cut:]), whole), (seed, cut)
            assert before.catalog.model_dump() == kept  # what a running job holds is left as it was


async def test_the_planner_reads_only_the_catalog_events_since_its_last_read() -> None:
    log = CountingLog()
    await _history_of(random.Random(1), log, "t", 20)
    await _history_of(random.Random(2), log, "u", 5)  # another tenant's
    catalogs = LogCatalogs(log)
    first, seq = await catalogs.load("t")
    assert log.handed == 20
    log.handed = 0
    again, same_seq = await catalogs.load("t")
    assert (log.handed, again, same_seq) == (0, first, seq)  # nothing new: nothing folded, the same catalog
    held = first.model_dump()
    await log.append("muster.evt.t.catalog.services.d", [Append(CatalogEntityPut(kind="services", name="d", entity={"name": "d"}),
                                                                msg_id="t.d")])
    await log.append("muster.evt.t.catalog.services.a", [Append(CatalogEntityDeleted(kind="services", name="a"), msg_id="t.-a")])
    newer, newer_seq = await catalogs.load("t")
    assert log.handed == 2  # was every catalog event of the tenant, at every request
    fresh, fresh_seq = await LogCatalogs(log).load("t")
    assert (newer.model_dump(), newer_seq) == (fresh.model_dump(), fresh_seq) and newer_seq > seq
    assert "d" in newer.services and "a" not in newer.services
    assert first.model_dump() == held
    assert isinstance(newer, Catalog)
    older, at = await catalogs.load("t", up_to_seq=seq)  # a running job's: as the log had it then
    assert (older.model_dump(), at) == (held, seq)
