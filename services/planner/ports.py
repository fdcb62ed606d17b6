"""The planner's own ports: what it needs from outside besides the log, the task queue and the
clock (`muster.ports`).

Which clusters it acts for, the checks and policies later features plug in, resource pools,
where catalogs come from, the solver a dry run asks, the live provisioners and the budgets the
concurrency limits share with other planners, and the tenants' spend they share. The composition
root (`bootstrap.py`) is given them once; nothing changes them afterwards."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from contracts.catalog import Catalog
from contracts.events import LayoutRequested
from contracts.layout import Layout
from contracts.pools import Callback
from contracts.tasks import ProvisionerPresence
from muster.ports.budgets import Budgets as Budgets

from .domain.admission import PoolAdmission
from .domain.cluster import Cluster
from .domain.job import Job
from .domain.operations import Operation
from .messages import RequestContext

if TYPE_CHECKING:
    from contracts.events import Event
    from contracts.records import Recorded
    from services.pool.domain.pool import Pool


class Ownership(Protocol):
    """Which clusters this planner acts for: every one (one planner), or those of the shards
    it holds a lease on (`sharding.ShardOwnership`). Requests for other clusters are refused,
    their events skipped, and `resume` rebuilds only owned clusters' jobs."""

    def owns(self, tenant: str, cluster_id: str) -> bool: ...

    async def settle(self, tenant: str, cluster_id: str) -> None:
        """Awaited before an event about the cluster is taken in or skipped; raises
        `muster.routing.NotYet` while `owns` cannot be trusted (a lease being renewed late), and
        the event comes again later."""
        ...


class OwnsEverything:
    """One planner: it acts for every cluster, and always knows it."""

    def owns(self, tenant: str, cluster_id: str) -> bool:
        return True

    async def settle(self, tenant: str, cluster_id: str) -> None:
        return None


class Shards(Protocol):
    """The shards clusters are split into, and which this planner holds (`sharding.ShardOwnership`):
    what a budget shared by several planners is divided by."""

    def shard_of(self, cluster_id: str) -> int: ...

    def holds(self, shard: int) -> bool: ...


class OneShard:
    """One planner, every cluster: one shard, always held."""

    def shard_of(self, cluster_id: str) -> int:
        return 0

    def holds(self, shard: int) -> bool:
        return True


class SpendBoard(Protocol):
    """Each tenant's spend by shard, shared by every planner (`domain/spend.py`; the KV bucket
    `spend`: `muster.bus.spend.NatsSpend`; in memory: `muster.ports.memory.MemorySpend`)."""

    def known(self) -> Mapping[str, Mapping[str, Any]]:
        """`<tenant>.<shard>` -> that shard's spend, as last seen (no round trip)."""
        ...

    async def put(self, name: str, spend: Mapping[str, Any]) -> None:
        """Written by the shard's owner only: no other planner writes that key."""
        ...

    def revision(self, tenant: str) -> int:
        """The last revision of any of the tenant's keys, as last seen (0: none)."""
        ...

    async def put_if(self, name: str, spend: Mapping[str, Any], tenant: str, last: int) -> int | None:
        """Written only if no key of the tenant changed since revision `last` (a reservation,
        decision 44): None once written, else the revision the bucket is at for the tenant."""
        ...

    async def caught_up(self, tenant: str, last: int, timeout: float) -> None:
        """Wait until the tenant's keys are seen up to revision `last` (TimeoutError past it)."""
        ...


class AdmissionCheck(Protocol):
    def __call__(self, ctx: RequestContext, op: Operation, command: Any) -> None:
        """Runs on every parsed request before the operation's own rules; raises
        `domain.admission.Refused` to reject (a permission check, a quota)."""
        ...


@dataclass(frozen=True)
class PoolReaction:
    """What the planner records after a pool's decision was taken into a job: the aggregates'
    changes as they are (a job that gave up), or, `advance`, the job taken a step first (the
    creates a grant lets go) and `then` after it (the job's record of the grant)."""

    advance: bool
    then: Callable[[], object] | None = None


class Pools(PoolAdmission, Protocol):
    """Resource pools as the planner uses them (`pools.PoolBroker`, docs/pools.md): admission
    asks whether a pool would serve a request (`refusal`), dispatch holds a node's create until
    it has a host (`admit`), after every recorded decision the pool is told what changed
    (`after`), and the pools' decisions are taken into the jobs that wait for them."""

    def admit(self, job: Job, cluster: Cluster, ready: Sequence[str]) -> Sequence[str]: ...

    async def after(self, job: Job, cluster: Cluster) -> None: ...

    def decisions(self, name: str, r: Recorded) -> list[Event]: ...

    def last_word(self, request_id: str) -> tuple[str, Pool, Event] | None: ...

    async def react(self, name: str, pool: Pool, decision: Event, job: Job, cluster: Cluster) -> PoolReaction | None: ...


class CallbackCheck(Protocol):
    async def __call__(self, callback: Callback, tenant: str) -> tuple[str, str]:
        """Whether the pool service would POST to `tenant`'s pool callback's URL (decision 38): (why its
        rule refuses it, '') or ('', a warning: it does not resolve now, or no pool service
        answered) or ('', '')."""
        ...


class CatalogSource(Protocol):
    async def load(self, tenant: str, up_to_seq: int | None = None) -> tuple[Catalog, int]:
        """The tenant's catalog and the log sequence of its last event (0: none yet); with
        `up_to_seq`, the catalog as it was there (a job's own: `PlannerState.catalog_of`)."""
        ...


class Workers(Protocol):
    async def live(self) -> list[ProvisionerPresence] | None:
        """The live provisioners now, with whom and which class each serves and whether it
        drains (None: the presence records could not be read)."""
        ...

    async def holding(self) -> set[str] | None:
        """The attempts (`<job>.<task>.<attempt>`) the live provisioners hold now, as each
        answers (one that does not answer holds nothing as far as anyone can tell); None: the
        presence records could not be read."""
        ...

    async def ended(self, tenant: str, provisioners: set[str]) -> dict[str, int]:
        """For each of `provisioners`, the log sequence before which its claims were made by a
        process that has stopped, with whatever it held (docs/decisions/0054): past every claim
        when its presence ended (expired or deleted) and it keeps a lease (registered on the
        tenant's log); its current session's registration once every earlier process of its id
        must have stopped; 0 when nothing is known to have stopped. Raises when that cannot be
        read."""
        ...


class NoLayout(Exception):
    """The solver answered: no layout satisfies the request (the message says why; `fields`:
    the request's fields it is about, `LayoutUnsolvable.fields`)."""

    def __init__(self, message: str, fields: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.fields = fields


class SolverUnavailable(Exception):
    """No solver answered (none running, or it timed out); the message names what happened."""


class Solver(Protocol):
    async def solve(self, tenant: str, request: LayoutRequested) -> Layout:
        """The layout for a dry run, recorded nowhere; raises NoLayout or SolverUnavailable."""
        ...

