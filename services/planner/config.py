"""The planner's settings (`muster planner`'s options)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from muster.destinations import Allowed
from services.governance.domain.deadline import POLICY_DEADLINE_S

from .domain.saga import Settings


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
    policy_deadline_s: float = POLICY_DEADLINE_S
    """How long one of a tenant's policies may evaluate before it denies (docs/governance.md)."""
    callbacks_allowed: Allowed = field(default_factory=Allowed)
    """Where a pool callback may go besides public addresses: the pool service's setting, which
    the planner checks a callback with when no pool service answers (docs/pools.md)."""

    segments: bool = field(default_factory=lambda: os.environ.get("MUSTER_SEGMENTS") != "0")
    """A node's run of tasks that only it lets go is queued and sent as one message (docs/
    decisions/0058); on unless `MUSTER_SEGMENTS=0` (provisioners older than segments cannot
    read such a message)."""

    @property
    def settings(self) -> Settings:
        return Settings(provisioner_class=self.provisioner_class, mode=self.mode, segments=self.segments)
