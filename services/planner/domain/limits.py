"""Concurrency limits at dispatch (pure): at most N tasks of a provider, or of a tenant, in
flight at once across all of the planner's jobs.

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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from contracts.catalog import Action

from .cluster import Cluster
from .job import Job

PROVIDER_ACTIONS = frozenset({Action.CREATE, Action.CONFIRM, Action.DELETE})

Key = tuple[str, ...]
"""("provider", tenant, provider) or ("tenant", tenant)."""


@dataclass
class Limits:
    provider_limit: Callable[[str, str], int | None] = lambda tenant, provider: None
    """The `maxconcurrent` of a tenant's provider (None: no limit)."""
    tenant_limits: Mapping[str, int] = field(default_factory=dict)
    default_tenant_limit: int | None = None
    in_flight: dict[str, dict[str, tuple[Key, ...]]] = field(default_factory=dict)
    """job id -> its queued tasks -> the keys each counts against."""
    count: Counter[Key] = field(default_factory=Counter)
    held: dict[str, Counter[Key]] = field(default_factory=dict)
    """job id -> tasks held back at its last admit, per limit that held them."""

    def tenant_limit(self, tenant: str) -> int | None:
        return self.tenant_limits.get(tenant, self.default_tenant_limit)

    def limit(self, key: Key) -> int | None:
        return self.provider_limit(key[1], key[2]) if key[0] == "provider" else self.tenant_limit(key[1])

    def keys(self, job: Job, cluster: Cluster, task_id: str) -> tuple[Key, ...]:
        found: list[Key] = []
        if job.tasks[task_id].action in PROVIDER_ACTIONS and self.provider_limit(job.tenant, cluster.provider) is not None:
            found.append(("provider", job.tenant, cluster.provider))
        if self.tenant_limit(job.tenant) is not None:
            found.append(("tenant", job.tenant))
        return tuple(found)

    # -- DispatchPolicy ----------------------------------------------------------------------

    def admit(self, job: Job, cluster: Cluster, ready: Sequence[str]) -> Sequence[str]:
        job_id = str(job.id)
        self._resync(job, cluster)
        self.held.pop(job_id, None)
        admitted: list[str] = []
        held: Counter[Key] = Counter()
        mine = self.in_flight.setdefault(job_id, {})
        for task_id in ready:
            keys = self.keys(job, cluster, task_id)
            full = [k for k in keys if not self._room(k)]
            if full:
                held.update(full)
                continue
            admitted.append(task_id)
            mine[task_id] = keys
            self.count.update(keys)
        if held:
            self.held[job_id] = held
        if not mine:
            self.in_flight.pop(job_id, None)
        return admitted

    def track(self, job: Job, cluster: Cluster) -> None:
        """Count a job's tasks in flight (a planner rebuilt from the log, before it dispatches)."""
        self._resync(job, cluster)

    def _resync(self, job: Job, cluster: Cluster) -> None:
        """This job's in-flight tasks as the job now says (finished ones free their slots)."""
        job_id = str(job.id)
        before = self.in_flight.get(job_id, {})
        queued = set() if job.is_final else {t for t, s in job.task_state.items() if s == "queued"}
        now = {t: before[t] if t in before else self.keys(job, cluster, t) for t in queued}
        for task_id, keys in before.items():
            if task_id not in now:
                self.count.subtract(keys)
        for task_id, keys in now.items():
            if task_id not in before:
                self.count.update(keys)
        if now:
            self.in_flight[job_id] = now
        else:
            self.in_flight.pop(job_id, None)

    def forget(self, job_id: str) -> None:
        """A job this planner no longer drives (another took its cluster over)."""
        for keys in self.in_flight.pop(job_id, {}).values():
            self.count.subtract(keys)
        self.held.pop(job_id, None)

    def wake(self) -> list[str]:
        """Jobs holding tasks back on a limit that has room now: advance each once again (one
        that still finds no room is held again and waits for the next slot)."""
        return [job_id for job_id, held in self.held.items() if any(self._room(k) for k in held)]

    def _room(self, key: Key) -> bool:
        limit = self.limit(key)
        return limit is None or self.count[key] < limit

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
        keys = {k for k, n in self.count.items() if n} | {k for held in self.held.values() for k in held}
        out: list[dict[str, object]] = []
        for key in sorted(keys):
            held = sum(h[key] for h in self.held.values())
            entry: dict[str, object] = {"limit": self.limit(key), "in_flight": self.count[key], "held": held,
                                        "kind": key[0], "tenant": key[1]}
            if key[0] == "provider":
                entry["provider"] = key[2]
            out.append(entry)
        return out

