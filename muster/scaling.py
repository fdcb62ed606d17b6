"""How many workers to add or remove (pure): the planners' recommendations against the live
capacity of the registered provisioners.

Every planner reports, per (tenant, class), the workers its queued tasks need
(`services/planner/metrics.py`). Planners share the queues, so their figures for one class
are summed. The capacity of a class is the sum of the capacities of the live provisioners of
that class that are not draining (their presence records). A provisioner serving several
tenants counts once per class: its slots are shared, so the need of its tenants is summed
before it is compared. The difference, in worker slots, is what to add (positive) or remove
(negative); `processes` turns it into provisioner processes of a given capacity.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ClassScaling:
    provisioner_class: str
    needed: int
    """Worker slots the queued work of this class needs (sum over planners and tenants)."""
    capacity: int
    """Worker slots of the live provisioners of this class (draining ones not counted)."""
    provisioners: int
    queue_length: int
    in_progress: int
    arrival_rate_per_s: float

    @property
    def delta(self) -> int:
        """Slots to add (> 0) or that could go (< 0)."""
        return self.needed - self.capacity

    def processes(self, capacity_each: int) -> int:
        """Provisioner processes of `capacity_each` slots to add (> 0) or drain (< 0). Adding
        rounds up (the work must fit); removing rounds down (never below the need)."""
        if self.delta > 0:
            return math.ceil(self.delta / capacity_each)
        return -math.floor(-self.delta / capacity_each)

    def to_json(self) -> dict[str, Any]:
        return {
            "class": self.provisioner_class, "needed": self.needed, "capacity": self.capacity, "delta": self.delta,
            "provisioners": self.provisioners, "queue_length": self.queue_length, "in_progress": self.in_progress,
            "arrival_rate_per_s": self.arrival_rate_per_s,
        }


def by_class(planner_answers: Iterable[Mapping[str, Any]], provisioners: Iterable[Any]) -> dict[str, ClassScaling]:
    """`planner_answers`: what planners answer on `muster.metrics.planner`; `provisioners`:
    live `ProvisionerPresence` records. Classes that have work or provisioners appear."""
    needed: dict[str, int] = {}
    queued: dict[str, int] = {}
    running: dict[str, int] = {}
    rate: dict[str, float] = {}
    for answer in planner_answers:
        for q in answer.get("queues") or ():
            try:
                k = str(q["class"])
                needed[k] = needed.get(k, 0) + int(q["recommended_workers"])
                queued[k] = queued.get(k, 0) + int(q["queue_length"])
                running[k] = running.get(k, 0) + int(q["in_progress"])
                rate[k] = rate.get(k, 0.0) + float(q["arrival_rate_per_s"])
            except (KeyError, TypeError, ValueError):
                continue  # an answer of another shape
    capacity: dict[str, int] = {}
    count: dict[str, int] = {}
    for p in provisioners:
        if p.draining:
            continue
        k = p.info.provisioner_class
        capacity[k] = capacity.get(k, 0) + p.info.capacity
        count[k] = count.get(k, 0) + 1
    return {
        k: ClassScaling(k, needed.get(k, 0), capacity.get(k, 0), count.get(k, 0), queued.get(k, 0), running.get(k, 0),
                        rate.get(k, 0.0))
        for k in sorted(set(needed) | set(capacity))
    }


def unserved(planner_answers: Iterable[Mapping[str, Any]], provisioners: Iterable[Any]) -> dict[tuple[str, str], int]:
    """(tenant, class) -> tasks queued there that no live provisioner (not draining) would
    take: they wait until one registers for that tenant and class, or time out."""
    serving = {(t, p.info.provisioner_class) for p in provisioners if not p.draining for t in p.info.tenants}
    queued: dict[tuple[str, str], int] = {}
    for answer in planner_answers:
        for q in answer.get("queues") or ():
            try:
                key, n = (str(q["tenant"]), str(q["class"])), int(q["queue_length"])
            except (KeyError, TypeError, ValueError):
                continue  # an answer of another shape
            if n > 0 and key not in serving:
                queued[key] = queued.get(key, 0) + n
    return queued


def unserved_warning(tenant: str, provisioner_class: str, live: Iterable[Any], waiting: str) -> str | None:
    """What a user whose tasks of this tenant and class no live provisioner (not draining) takes
    is told, or None when one does: which live provisioners could take them and the grant that
    lets one (effective at once), or, with none of the class, the commands that start one; both
    a super admin's (services are theirs, docs/security.md). A `muster grant <provisioner>`
    placeholder left the reader to find the name (`muster up`'s is `provisioner`), and said
    nothing when no provisioner of the class ran at all."""
    live = list(live)
    if any(not p.draining and p.info.provisioner_class == provisioner_class and tenant in p.info.tenants for p in live):
        return None
    said = f"no live provisioner serves tenant {tenant!r} (class {provisioner_class!r}): {waiting}"
    queue = f"execute --tenant {tenant} --scope queue:{provisioner_class}"
    draining = sorted(p.info.id for p in live if p.draining and p.info.provisioner_class == provisioner_class
                      and tenant in p.info.tenants)
    if draining:
        said += f" (draining: {', '.join(draining)})"
    of_class = [p for p in live if not p.draining and p.info.provisioner_class == provisioner_class]
    if of_class:
        # Not named: they serve other tenants, and a provisioner's id may name one (`prov-beta`);
        # the tenant's user reads this warning, the super admin lists them.
        return (f"{said}; {len(of_class)} live provisioner(s) of class {provisioner_class!r} serve other tenants: "
                f"a super admin lists them with muster provisioners list --all and grants one the queue: "
                f"muster grant PROVISIONER {queue}")
    name = f"prov-{provisioner_class}"
    return (f"{said}; no provisioner of class {provisioner_class!r} is running: a super admin starts one with "
            f"muster user create {name} --role service --service provisioner --tenant {tenant} --save {name}.cred, "
            f"muster grant {name} {queue}, then MUSTER_CREDENTIALS={name}.cred muster provisioner --class {provisioner_class}")
