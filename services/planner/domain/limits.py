"""Concurrency limits at dispatch (pure): at most N tasks of a provider, or of a tenant, in
flight at once.

A `DispatchPolicy`: ready tasks over a limit stay unqueued (nothing is recorded), and the job is
looked at again when a slot frees (`wake`); a cloud API that allows 5 concurrent creates gets
at most 5.

- per provider: the catalog's `maxconcurrent` on the provider counts the provider's own tasks
  (`create`, `confirm`, `delete`: the ones that call its API) of the tenant's clusters on it;
- per tenant: the planner's `--tenant-limit` counts every task of the tenant.

In flight = queued and not finished (a task attempt's `TaskQueued` until its outcome). Each
`admit` of a job first re-reads that job's in-flight tasks, so the counts follow the log's
view of every job that was advanced (which every change of a job is); a planner rebuilt from
the log counts its open jobs again as `resume` advances them.

**Shared.** With `shard_of` given, several planners enforce one limit together: each limit's
slots are divided among the shards in a shared budget (`budget.py`), and a task is admitted
only within the slots its cluster's shard holds (`grants`); the tasks held back are the
shard's demand, which the service asks the budget for. Without it, this planner's counts alone
decide (one planner acts for every cluster).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from contracts.catalog import Action

from .cluster import Cluster
from .job import Job

PROVIDER_ACTIONS = frozenset({Action.CREATE, Action.CONFIRM, Action.DELETE})

Key = tuple[str, ...]
"""("provider", tenant, provider) or ("tenant", tenant)."""
Slot = tuple[Key, int]
"""A limit and the shard it is counted in (0 when the limits are not shared)."""


@dataclass
class Limits:
    provider_limit: Callable[[str, str], int | None] = lambda tenant, provider: None
    """The `maxconcurrent` of a tenant's provider (None: no limit)."""
    tenant_limits: Mapping[str, int] = field(default_factory=dict)
    default_tenant_limit: int | None = None
    shard_of: Callable[[str], int] | None = None
    """A cluster id -> its shard, when the limits are shared with other planners; None: not."""
    in_flight: dict[str, dict[str, tuple[Slot, ...]]] = field(default_factory=dict)
    """job id -> its queued tasks -> the slots each counts against."""
    count: Counter[Slot] = field(default_factory=Counter)
    held: dict[str, Counter[tuple[Slot, ...]]] = field(default_factory=dict)
    """job id -> tasks held back at its last admit, by the slots each needs (every one: a shared
    budget is asked for all of them at once)."""
    grants: dict[Key, dict[int, int]] = field(default_factory=dict)
    """Shared: the slots of each limit this planner holds in the budget, per shard."""

    @property
    def shared(self) -> bool:
        return self.shard_of is not None

    def tenant_limit(self, tenant: str) -> int | None:
        return self.tenant_limits.get(tenant, self.default_tenant_limit)

    def limit(self, key: Key) -> int | None:
        return self.provider_limit(key[1], key[2]) if key[0] == "provider" else self.tenant_limit(key[1])

    def slots(self, job: Job, cluster: Cluster, task_id: str) -> tuple[Slot, ...]:
        shard = self.shard_of(str(cluster.id)) if self.shard_of is not None else 0
        found: list[Slot] = []
        if job.tasks[task_id].action in PROVIDER_ACTIONS and self.provider_limit(job.tenant, cluster.provider) is not None:
            found.append((("provider", job.tenant, cluster.provider), shard))
        if self.tenant_limit(job.tenant) is not None:
            found.append((("tenant", job.tenant), shard))
        return tuple(found)

    # -- DispatchPolicy ----------------------------------------------------------------------

    def unlimited(self, job: Job, cluster: Cluster) -> bool:
        """No limit applies to this job's tasks, and none of them is counted from before: it
        is neither tracked nor re-read (a re-read walks every task of the job, and a job of
        10,000 nodes is advanced a thousand times)."""
        return (str(job.id) not in self.in_flight and self.tenant_limit(job.tenant) is None
                and self.provider_limit(job.tenant, cluster.provider) is None)

    def counts(self, job: Job, cluster: Cluster) -> bool:
        """A limit counts this job's tasks (no segment is formed for it: `saga.CountsInFlight`)."""
        return not self.unlimited(job, cluster)

    def admit(self, job: Job, cluster: Cluster, ready: Sequence[str]) -> Sequence[str]:
        job_id = str(job.id)
        if self.unlimited(job, cluster):
            self.held.pop(job_id, None)
            return ready
        self._resync(job, cluster)
        self.held.pop(job_id, None)
        admitted: list[str] = []
        held: Counter[tuple[Slot, ...]] = Counter()
        mine = self.in_flight.setdefault(job_id, {})
        for task_id in ready:
            slots = self.slots(job, cluster, task_id)
            if not all(self._room(s) for s in slots):
                held[slots] += 1
                continue
            admitted.append(task_id)
            mine[task_id] = slots
            self.count.update(slots)
        if held:
            self.held[job_id] = held
        if not mine:
            self.in_flight.pop(job_id, None)
        return admitted

    def track(self, job: Job, cluster: Cluster) -> None:
        """Count a job's tasks in flight (a planner rebuilt from the log, before it dispatches)."""
        if not self.unlimited(job, cluster):
            self._resync(job, cluster)

    def _resync(self, job: Job, cluster: Cluster) -> None:
        """This job's in-flight tasks as the job now says (finished ones free their slots)."""
        job_id = str(job.id)
        before = self.in_flight.get(job_id, {})
        queued = set() if job.is_final else {t for t, s in job.task_state.items() if s == "queued"}
        now = {t: before[t] if t in before else self.slots(job, cluster, t) for t in queued}
        for task_id, slots in before.items():
            if task_id not in now:
                self.count.subtract(slots)
        for task_id, slots in now.items():
            if task_id not in before:
                self.count.update(slots)
        if now:
            self.in_flight[job_id] = now
        else:
            self.in_flight.pop(job_id, None)

    def forget(self, job_id: str) -> None:
        """A job this planner no longer drives (another took its cluster over)."""
        for slots in self.in_flight.pop(job_id, {}).values():
            self.count.subtract(slots)
        self.held.pop(job_id, None)

    def wake(self) -> list[str]:
        """Jobs holding back a task whose every limit has room now: advance each once again (one
        that still finds no room is held again and waits for the next slot)."""
        return [job_id for job_id, held in self.held.items() if any(all(self._room(s) for s in slots) for slots in held)]

    def _room(self, slot: Slot) -> bool:
        key, shard = slot
        limit = self.limit(key)
        if limit is None:
            return True
        if self.shared:
            return self.count[slot] < self.grants.get(key, {}).get(shard, 0)
        return self.count[slot] < limit

    # -- the shared budget's view (`budget.py`) ---------------------------------------------------

    def keys(self) -> set[Key]:
        """Every limit this planner counts, holds tasks on, or holds slots of."""
        return ({k for (k, _), n in self.count.items() if n} | {k for _, slot in self._held() for k, _ in [slot]}
                | {k for k, shares in self.grants.items() if shares})

    def demand(self, key: Key) -> tuple[dict[int, int], dict[int, int]]:
        """Per shard: the limit's tasks in flight, and those held back waiting for one of its
        slots. A task that needs slots of several limits waits for them one limit at a time,
        in the order of their keys: it asks for a limit's slot only once every limit before it
        has room for it. So no shard holds slots of a later limit for tasks that wait for an
        earlier one, while another holds the earlier limit's for tasks that wait for the later
        (two shards each holding what the other's tasks need, for good)."""
        in_flight = {s: n for (k, s), n in self.count.items() if k == key and n}
        wanted: Counter[int] = Counter()
        room: dict[Slot, float] = {}  # what is left of each slot's room as the held tasks take it, in order
        for held in self.held.values():
            for slots, n in held.items():
                asking: float = n
                for slot in sorted(slots):
                    if slot[0] == key:
                        wanted[slot[1]] += int(asking)
                        break
                    left = room.setdefault(slot, self._free(slot))
                    asking = min(asking, left)
                    room[slot] = left - asking
                    if not asking:
                        break
        return in_flight, dict(wanted)

    def _free(self, slot: Slot) -> float:
        """The slots of a limit this planner may still use at a shard (unbounded without a limit)."""
        if self.limit(slot[0]) is None:
            return float("inf")
        return max(0, self.grants.get(slot[0], {}).get(slot[1], 0) - self.count[slot])

    def _held(self) -> Iterator[tuple[int, Slot]]:
        """(tasks held, a slot they need), over every job."""
        for held in self.held.values():
            for slots, n in held.items():
                for slot in slots:
                    yield n, slot

    def granted(self, key: Key, shares: Mapping[int, int]) -> bool:
        """The slots this planner now holds of `key` (its shards' shares); True if a shard holds
        more than before (held tasks may go now)."""
        before = self.grants.get(key, {})
        self.grants[key] = {s: n for s, n in shares.items() if n}
        return any(n > before.get(s, 0) for s, n in shares.items())

    # -- what the plan and the metrics show ------------------------------------------------------

    def shown(self, tenant: str, provider: str, actions: Sequence[Action]) -> dict[str, object]:
        """The limits a plan of these task actions will run under (the dry run shows them)."""
        out: dict[str, object] = {}
        limit = self.provider_limit(tenant, provider)
        tasks = sum(a in PROVIDER_ACTIONS for a in actions)
        if limit is not None and tasks:
            out["provider"] = {"name": provider, "maxconcurrent": limit, "tasks": tasks}
        if self.tenant_limit(tenant) is not None:
            out["tenant"] = self.tenant_limit(tenant)
        return out

    def snapshot(self) -> list[dict[str, object]]:
        """Per limit, this planner's tasks in flight and those it holds back (and, shared, the
        slots it holds)."""
        out: list[dict[str, object]] = []
        full = Counter(k for n, (k, s) in self._held() if not self._room((k, s)) for _ in range(n))
        for key in sorted({k for (k, _), n in self.count.items() if n} | set(full)):
            entry: dict[str, object] = {"limit": self.limit(key), "in_flight": sum(self.demand(key)[0].values()),
                                        "held": full[key], "kind": key[0], "tenant": key[1]}
            if key[0] == "provider":
                entry["provider"] = key[2]
            if self.shared:
                entry["slots"] = sum(self.grants.get(key, {}).values())
            out.append(entry)
        return out


def parse_tenant_limits(values: Sequence[str]) -> tuple[int | None, dict[str, int]]:
    """`--tenant-limit` values (`N` for every tenant, `TENANT=N` for one) as (default, per tenant)."""
    default: int | None = None
    per_tenant: dict[str, int] = {}
    for value in values:
        tenant, _, number = value.rpartition("=")
        if not number.isdigit() or int(number) < 1:
            raise ValueError(f"{value!r}: give N or TENANT=N with N >= 1")
        if tenant:
            per_tenant[tenant] = int(number)
        else:
            default = int(number)
    return default, per_tenant
