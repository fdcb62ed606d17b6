"""Every operation the planner knows, in one table (pure).

One row per job operation: which command asks for it, whether it needs a layout from the solver
first, whether the cluster loses what the tasks took away only when the job succeeds, how
`build_plan` plans it (its per-service action chain, coopr-facts §2.2), whether `muster plan`
can plan it offline, and the admission rules it runs (`admission.py`), in order. The service,
`build_plan`, the dry runs and `muster plan` all read this table; nothing else lists operations.

`configure` with `restart` is its own operation (`configure-restart`): same verb and command,
another chain. The request verbs are the distinct `verb`s (`VERBS`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from contracts.catalog import Action
from contracts.commands import VERB_OF, ConfigureCluster

from . import admission as rule
from .admission import Rule

A = Action
Target = Literal["new-cluster", "cluster", "job", "plan", "lease"]


@dataclass(frozen=True)
class Operation:
    name: str
    """As recorded in `JobRequested.operation`."""
    command: str
    """The command type that asks for it (`contracts.commands`)."""
    target: Target
    layout: bool = False
    """Asks the solver for a layout (LayoutRequested) before it can be planned."""
    shrinking: bool = False
    """The cluster keeps its nodes/services until the job succeeds (then loses what the tasks
    took away); other operations record the target layout when planned."""
    chain: tuple[Action, ...] = ()
    """Each planned service's actions, in order; () = not planned by `build_plan`."""
    machine: bool = False
    """Planned nodes get their machine actions even without a planned service."""
    needs_nodes: bool = False
    """`build_plan` must be told which nodes (those added or removed)."""
    needs_services: bool = False
    """`build_plan` must be told which services."""
    closure: Literal["", "requires", "dependents"] = ""
    """Also plans what the named services need running, or what depends on them."""
    offline: bool = False
    """`muster plan` plans it from a nodes file, without a solver or a log."""
    rules: tuple[Rule, ...] = ()
    """Admission rules, run in order once the request's facts are loaded."""
    every_problem: bool = False
    """Its rules look at separate fields of the request: all run, and a refusal names every
    problem found (`admission.every_refusal`); otherwise the first refusal stops the rest (a
    cluster's busy or deleted makes the later rules moot)."""
    rolling: bool = False
    """May be done a batch of nodes at a time (the command's `rolling`, `rolling.py`)."""
    observes: bool = False
    """Only looks: the cluster keeps its status, and no node's failure stops the job."""

    @property
    def verb(self) -> str:
        return VERB_OF[self.command]


_CLUSTER: tuple[Rule, ...] = (rule.at_version, rule.not_busy, rule.not_deleted, rule.active)
_PICKED = (*_CLUSTER, rule.nodes_known)
"""May name the nodes it acts on (`nodes`)."""
# A `status` check follows every start and stop that is not on its way out (a service without a
# `status` action skips it): its state is recorded, and a start that leaves it not running fails.
_CREATE = (A.CREATE, A.CONFIRM, A.BOOTSTRAP, A.INSTALL, A.CONFIGURE, A.INITIALIZE, A.START, A.STATUS)

_ROWS = (
    Operation("create", "CreateCluster", "new-cluster", layout=True, chain=_CREATE, machine=True, offline=True, every_problem=True,
              rules=(rule.template_allows_size, rule.provider_known, rule.services_known, rule.services_allowed,
                     rule.services_required, rule.setting_allowed, rule.provider_mapped, rule.callback_needs_pool, rule.pool_admits)),
    Operation("delete", "DeleteCluster", "cluster", shrinking=True, chain=(A.DELETE,), machine=True, offline=True,
              rules=(rule.at_version, rule.not_busy, rule.not_deleted)),  # a cluster in any state may be deleted
    Operation("expand", "ExpandCluster", "cluster", layout=True, chain=_CREATE, machine=True, needs_nodes=True,
              rules=(*_CLUSTER, rule.grows, rule.size_allowed, rule.callback_needs_pool, rule.pool_admits)),
    Operation("shrink", "ShrinkCluster", "cluster", layout=True, shrinking=True, chain=(A.STOP, A.DELETE), machine=True,
              needs_nodes=True, rules=(*_CLUSTER, rule.shrinks, rule.size_allowed)),
    Operation("add-services", "AddServices", "cluster", layout=True, needs_services=True, offline=True,
              chain=(A.BOOTSTRAP, A.INSTALL, A.CONFIGURE, A.INITIALIZE, A.START, A.STATUS),
              rules=(*_CLUSTER, rule.services_known, rule.services_allowed, rule.services_absent,
                     rule.services_required)),
    Operation("remove-services", "RemoveServices", "cluster", layout=True, shrinking=True, needs_services=True, offline=True,
              chain=(A.STOP, A.REMOVE), rules=(*_CLUSTER, rule.services_present)),
    Operation("configure", "ConfigureCluster", "cluster", chain=(A.BOOTSTRAP, A.CONFIGURE), offline=True, rules=_PICKED,
              rolling=True),
    # muster: a node's new config is written before its service stops (Coopr stopped it first),
    # so a config that fails to apply leaves the service running on the old one; the rollback
    # puts the old config back before the service starts again (`rollback.py`).
    Operation("configure-restart", "ConfigureCluster", "cluster", chain=(A.BOOTSTRAP, A.CONFIGURE, A.STOP, A.START, A.STATUS),
              offline=True, rules=_PICKED, rolling=True),
    Operation("start", "StartServices", "cluster", chain=(A.START, A.STATUS), closure="requires", offline=True,
              rules=(*_PICKED, rule.named_services_known)),
    Operation("stop", "StopServices", "cluster", chain=(A.STOP, A.STATUS), closure="dependents", offline=True,
              rules=(*_PICKED, rule.named_services_known)),
    Operation("restart", "RestartServices", "cluster", chain=(A.STOP, A.START, A.STATUS), closure="dependents", offline=True,
              rules=(*_PICKED, rule.named_services_known), rolling=True),
    # The named service only, with the catalog's current definition; dependents keep running
    # (a rolling upgrade), so the service's install must cope with a live peer.
    Operation("upgrade", "UpgradeService", "cluster", chain=(A.STOP, A.INSTALL, A.CONFIGURE, A.START, A.STATUS),
              needs_services=True, rules=(*_CLUSTER, rule.named_services_known), rolling=True),
    # Planned by `restore.restore_plan` (phases of ordinary plans), not by one chain.
    Operation("rollback", "RollbackCluster", "cluster", shrinking=True, rules=(*_CLUSTER, rule.restorable)),
    # Observed state: every node's `status` tasks; never stops on a failed check (its tolerance
    # is every node) and leaves the cluster's status as it was.
    Operation("check", "CheckCluster", "cluster", chain=(A.STATUS,), offline=True, observes=True,
              rules=(rule.at_version, rule.not_busy, rule.not_deleted, rule.named_services_known)),
    # Planned by `observed.repair_plan` from the drift: phases of `repair-node`, `repair-install`, `start`, `stop`,
    # `restart`, `configure-restart`. Rolling: the nodes it only brings up go first (`observed.up_first`).
    Operation("repair", "RepairCluster", "cluster", rules=(*_CLUSTER, rule.drifted), rolling=True),
    Operation("repair-install", "RepairCluster", "cluster", chain=(A.INSTALL, A.CONFIGURE), rules=_CLUSTER),
    # A node whose services could not be asked: its provider confirms it (the namespaces provider
    # starts its sshd again if it died), then its services start (idempotent) and are asked.
    Operation("repair-node", "RepairCluster", "cluster", chain=(A.CONFIRM, A.START, A.STATUS), machine=True, closure="requires",
              rules=_CLUSTER),
    # Runs a saved plan: the saved request's own row decides (and its rules run again).
    Operation("apply", "ApplyPlan", "plan"),
    # Records the cluster's new lease at once (`ClusterLeaseChanged`); no job.
    Operation("extend-lease", "ExtendLease", "lease", rules=(rule.at_version, rule.not_deleted)),
    Operation("pause", "PauseJob", "job"),
    Operation("resume", "ResumeJob", "job"),
    Operation("cancel", "CancelJob", "job"),
    Operation("retry", "RetryJob", "job"),
    # A job waiting for approval (docs/governance.md): decided by a principal with `approve`.
    Operation("approve", "ApproveJob", "job"),
    Operation("reject", "RejectJob", "job"),
)

OPERATIONS: dict[str, Operation] = {op.name: op for op in _ROWS}
CHAINS: dict[str, tuple[Action, ...]] = {op.name: op.chain for op in _ROWS if op.chain}
"""Each plannable operation's per-service action chain (Coopr's `Actions.actionOrder`)."""
OFFLINE: tuple[str, ...] = tuple(op.name for op in _ROWS if op.offline)
ROLLING: tuple[str, ...] = tuple(op.name for op in _ROWS if op.rolling)
VERBS: tuple[str, ...] = tuple(sorted({op.verb for op in _ROWS}))


def operation_of(command: Any) -> Operation:
    """The row a command asks for (`ConfigureCluster` with `restart` is `configure-restart`)."""
    if isinstance(command, ConfigureCluster) and command.restart:
        return OPERATIONS["configure-restart"]
    return OPERATIONS[VERB_OF[command.type]]
