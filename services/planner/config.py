"""The planner's settings, and its hooks: the places later features plug into without
touching the saga (see docs/planner.md, "Service layer")."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .domain.saga import DispatchAll, DispatchPolicy, Settings

if TYPE_CHECKING:
    from .domain.cluster import Cluster
    from .domain.job import Job
    from .domain.operations import Operation
    from .messages import RequestContext


@dataclass
class PlannerConfig:
    instance: str = "planner-1"
    max_attempts: int = 3
    provisioner_class: str = "default"
    mode: str = "eager"
    task_timeout_s: float = 900.0
    action_timeout_s: dict[str, float] = field(default_factory=lambda: {"default": 600.0})
    solve_timeout_s: float = 30.0
    ack_wait_s: float = 30.0
    replicas: int = 1
    """Replicas of the buckets the planner declares (the nodes maps, the leases, the snapshots)."""
    shards: int = 16
    """Shards the clusters are split into; every planner must use the same number."""
    lease_ttl_s: float = 10.0
    """A dead planner's shards are taken over this long after its last lease renewal."""
    snapshot_every: int = 100
    """Events of a cluster or job between two of its snapshots (0: no snapshots; resume folds
    every event)."""
    tenant_limit: int | None = None
    """Tasks of one tenant in flight at once (None: no limit); `tenant_limits` per tenant."""
    tenant_limits: dict[str, int] = field(default_factory=dict)

    @property
    def settings(self) -> Settings:
        return Settings(provisioner_class=self.provisioner_class, mode=self.mode)


AdmissionCheck = Callable[["RequestContext", "Operation", Any], None]
"""Runs on every parsed request before the operation's own rules; raises
`domain.admission.Refused` to reject (a permission check, a quota)."""


AfterHook = Callable[["Job", "Cluster"], Awaitable[None]]
"""Runs after every decision of the saga is recorded (and its tasks published), under the
planner's lock: for what must follow a job's changes outside the planner (a pool told of a
node's confirm, delete or failure)."""


def owns_everything(tenant: str, cluster_id: str) -> bool:
    return True


async def settled_at_once(tenant: str, cluster_id: str) -> None:
    return None


@dataclass
class Hooks:
    owns: Callable[[str, str], bool] = owns_everything
    """Does this planner act for the cluster? (One planner today; with shards, the holder of
    the cluster's shard lease.) Requests for other clusters are refused, their events skipped,
    and `resume` rebuilds only owned clusters' jobs."""
    settle: Callable[[str, str], Awaitable[None]] = settled_at_once
    """Awaited before an event about the cluster is taken in or skipped; raises
    `muster.routing.NotYet` while `owns` cannot be trusted (with shards: a lease being renewed
    late), and the event comes again later."""
    admission: tuple[AdmissionCheck, ...] = ()
    dispatch: DispatchPolicy = field(default_factory=DispatchAll)
    """Which ready tasks may be queued now (limits per provider, a pool's grant)."""
    after: tuple[AfterHook, ...] = ()
    pools: Any = None
    """Resource pools (`pools.PoolBroker`): admission asks it (`admission.pool_admits`)."""
