"""The planner's composition root: every part of the service layer built once, from the ports
it is given (NATS adapters in `entrypoint.py`, in-memory fakes in unit tests), and never
changed afterwards."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from muster.ports.clock import AsyncioClock, Clock
from muster.ports.eventlog import EventLog
from muster.ports.taskqueue import TaskQueue
from muster.snapshots import SnapshotSource
from services.auth.domain.state import IdentityState

from . import leases
from .app import Planner
from .attempts import AttemptHolders
from .authz import OperationAuthz, catalog_reads, totals_reads
from .budget import SharedBudget
from .config import PlannerConfig
from .domain.limits import Limits
from .domain.saga import Chain, DispatchPolicy
from .execution import Execution
from .metrics import QueueMetrics
from .nodemaps import MemoryStore, NodeMaps
from .pools import PoolBroker, PoolFold
from .ports import (
    AdmissionCheck,
    Budgets,
    CallbackCheck,
    CatalogSource,
    OneShard,
    Ownership,
    OwnsEverything,
    Shards,
    Solver,
    SpendBoard,
    Workers,
)
from .recovery import Recovery
from .requests import Requests
from .routing import TIMERS
from .spend import SharedSpend
from .state import LogCatalogs, PlannerState
from .timers import Timers


def bootstrap(log: EventLog, queue: TaskQueue, config: PlannerConfig | None = None, *,
              ownership: Ownership | None = None, admission: Sequence[AdmissionCheck] = (),
              identities: IdentityState | None = None, dispatch: DispatchPolicy | None = None,
              pools: PoolFold | None = None, catalogs: CatalogSource | None = None, solver: Solver | None = None,
              clock: Clock | None = None, nodemaps: NodeMaps | None = None, snapshots: SnapshotSource | None = None,
              workers: Workers | None = None, budgets: Budgets | None = None, shards: Shards | None = None,
              callbacks: CallbackCheck | None = None, spend: SpendBoard | None = None) -> Planner:
    """The planner on these ports. `ownership`: which clusters it acts for (default: all);
    `admission`: checks every request passes before the operation's rules, and with
    `identities` the requester's grants too (docs/security.md); `dispatch`: a policy that holds
    ready tasks back, before the concurrency limits; `pools`: the pools, folded live (their
    grants, admission and reports: `pools.py`); `workers`: the live provisioners (None: the
    planner never warns that nobody serves a tenant); `budgets`: the concurrency limits' budgets,
    shared with the other planners and divided by `shards` (None: the limits count this
    planner's tasks alone); `callbacks`: the pool service's check of a pool callback's URL
    (None: not checked before the pool service's own POST); `spend`: the tenants' spend by
    shard, shared with the other planners for the policies' tenant totals (None: this planner's
    clusters are the tenant's)."""
    config = config or PlannerConfig()
    ownership = ownership or OwnsEverything()
    state = PlannerState(log, catalogs or LogCatalogs(log), snapshots, config.snapshot_every)

    def provider_limit(tenant: str, provider: str) -> int | None:
        catalog = state.catalogs.get(tenant)  # loaded before any decision about the tenant's jobs
        found = catalog.providers.get(provider) if catalog is not None else None
        return found.maxconcurrent if found is not None else None

    shards = shards or OneShard()
    limits = Limits(provider_limit, config.tenant_limits, config.tenant_limit,
                    shard_of=shards.shard_of if budgets is not None else None)
    budget = SharedBudget(limits, budgets, shards.holds) if budgets is not None else None
    shared = SharedSpend(state.clusters, spend, shards, state.jobs) if spend is not None else None
    if shared is not None:
        state.cluster_saved, state.job_saved = shared.saved, shared.job_saved
    broker = PoolBroker(log, pools, catalogs=state, jobs=state) if pools is not None else None
    # Concurrency limits last: they count only what the other policies let through.
    policy = Chain(*(p for p in (broker, dispatch) if p is not None), limits)
    timers = Timers(clock or AsyncioClock())
    metrics = QueueMetrics()
    nodemaps = nodemaps or NodeMaps(MemoryStore())
    attempts = AttemptHolders(log)
    execution = Execution(state, queue, timers, config, dispatch=policy, ownership=ownership, metrics=metrics,
                          nodemaps=nodemaps, limits=limits, pools=broker, budget=budget, workers=workers, attempts=attempts)
    checks = (*admission, OperationAuthz(identities, state.jobs.get)) if identities is not None else tuple(admission)
    requests = Requests(state, execution, config, ownership=ownership, admission=checks, dispatch=policy, pools=broker,
                        solver=solver, workers=workers, role_of=role_of(identities), callbacks=callbacks, spend=shared,
                        catalog_reader=catalog_reads(identities), totals_reader=totals_reads(identities))
    expiry = leases.LeaseExpiry(state.clusters, timers, lambda ctx: requests.handle(ctx, system=True))
    recovery = Recovery(state, execution, timers, limits, nodemaps, attempts, requests.approvals, config)
    planner = Planner(config=config, state=state, queue=queue, ownership=ownership, limits=limits, timers=timers,
                      metrics=metrics, nodemaps=nodemaps, execution=execution, attempts=attempts, requests=requests,
                      lease_expiry=expiry, recovery=recovery, pools=broker, workers=workers, spend=shared)
    for kind, handler in TIMERS.items():
        timers.on(kind, getattr(planner, handler))
    return planner


def role_of(identities: IdentityState | None) -> Callable[[str], str]:
    """A requester's role for the policies' input (`input.requester.role`): user, tenant_admin,
    super_admin, service; `unknown` on a bus without authorization or for a principal not known."""
    def role(principal: str) -> str:
        found = identities.principals.get(principal) if identities is not None else None
        return str(found.role) if found is not None else "unknown"

    return role
