"""Observed service state in the saga (pure): what a `status` task's outcome means, the desired
state a finished job leaves, and the repair of drift (`muster/readmodel/observed.py` says what
drift is; the Cluster aggregate keeps the observations).

- A `status` task after a start expects `running`, after a stop `stopped` (its predecessor in
  the service's chain on that node); one at a check expects nothing. Its state is recorded
  (`ServiceStateObserved`); a state that is not the expected one fails the attempt (retried:
  a service may take a moment to come up), so an unhealthy batch stops a rolling change.
- A stop job that succeeds makes its services desired-stopped on the nodes it stopped them on;
  any job that starts a service on a node makes it desired-running there again
  (`ServicesDesired`, per (node, service): `muster/readmodel/desired.py`).
- The repair of drift re-runs, one phase after another, on exactly the drifted pairs: install
  and configure where a service failed (one phase per service), the start of every service
  that should run and does not (the start of what it needs thrown in, but where that is meant to
  be stopped), the stop of every service that runs and should not, the restart of every service
  that runs an older config, configure and restart where its node was not even configured with
  the cluster's config (`stale`: written for the members before an expand or a shrink). Before
  all that, a node whose services' state is unknown (its ssh did not answer) is confirmed by its
  provider and its services started (stopped, those meant to be) and asked again (`reconnect`).
  A service failed while something it needs is down too is only started, after that (`repairs`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from contracts.catalog import Action, Service
from contracts.events import ServiceState
from contracts.layout import NodeSpec
from muster.readmodel import desired
from muster.readmodel.desired import Pair
from muster.readmodel.observed import as_repaired

from .cluster import Cluster
from .errors import PlanError
from .job import Job
from .model import Plan
from .plan import build_plan
from .restore import chain_phases, exact


def expected_state(job: Job, task_id: str) -> ServiceState | None:
    plan = job.active_plan
    if plan is None or task_id not in plan.by_id:
        return None
    task = plan.by_id[task_id]
    for before in plan.predecessors(task_id):
        other = plan.by_id[before]
        if other.node == task.node and other.service == task.service and other.action in (Action.START, Action.STOP):
            return "running" if other.action is Action.START else "stopped"
    return None


def desired_after(job: Job, cluster: Cluster) -> set[Pair]:
    """The (node, service) pairs meant to be stopped once `job` succeeded (on the cluster's
    layout after it): a stop job's stops are, a start (of any job) is not any more."""
    plan = job.plan
    if job.stopped_after is not None:  # a rollback: its target's
        return desired.stopped_pairs(cluster.layout(), job.stopped_after, job.stopped_on_after)
    stopped = cluster.stopped_pairs()
    if plan is None or (not stopped and job.operation != "stop"):  # (a create of 10,000 nodes: nothing to look at)
        return stopped
    stopped -= {(t.node, t.service) for t in plan.tasks if t.action is Action.START and t.service}
    if job.operation == "stop":
        stopped |= {(t.node, t.service) for t in plan.tasks if t.action is Action.STOP and t.service}
    return stopped


def repair_plan(services: Mapping[str, Service], cluster: Cluster) -> Plan:
    nodes = list(cluster.nodes.values())
    fixes = repairs(services, cluster)
    if not fixes:
        raise PlanError("nothing to repair")
    return fix_plan(services, nodes, fixes, cluster.stopped_pairs())


def fix_plan(services: Mapping[str, Service], nodes: list[NodeSpec], fixes: Mapping[Pair, str], stopped: Collection[Pair] = ()) -> Plan:
    """The phases of a repair, from what each (node, service) needs (`repairs`), each on exactly
    its pairs (`restore.exact`): what the drift says, and a start thrown in for what a started
    service needs, never for a pair meant to be stopped (`stopped`). Before session 36 each
    phase planned its operation's closure on the pairs' nodes: a restart of an outdated service
    restarted what needs it there, one the user had stopped too (started, and meant to run from
    then on); a stop stopped what needs it there, meant to run or not; a start started what it
    needs there, stopped or not; a reconnect started a service meant to be stopped (decision 53)."""
    kept = set(stopped)
    phases: list[Plan] = []
    # First the nodes that could not be asked: their provider confirms them (and brings their
    # ssh back where it can, docs/plugins.md), then their services are started (a start leaves
    # one that runs as it is) and asked again; one meant to be stopped is stopped instead (a
    # stop leaves a stopped one as it is), with the stops below.
    reconnect = {k for k, r in fixes.items() if r == "reconnect"}
    phases += exact(services, nodes, "repair-node", reconnect - kept, kept)
    bare = sorted({n for n, _ in reconnect & kept} - {n for n, _ in reconnect - kept})
    if bare:  # a node with only those: its confirm alone
        phases.append(build_plan(services, nodes, "repair-node", services=[], node_ids=bare))
    for service in sorted({s for (_, s), r in fixes.items() if r == "reinstall"}):
        failed = sorted({n for (n, s), r in fixes.items() if r == "reinstall" and s == service})
        phases.append(build_plan(services, nodes, "repair-install", services=[service], node_ids=failed))
    for action, kinds in (("start", ("start", "reinstall")), ("stop", ("stop",)), ("restart", ("restart",)),
                          ("configure-restart", ("reconfigure",))):
        # per (node, service): a service stopped on one node and meant to run on another is
        # started there only
        chosen = {k for k, r in fixes.items() if r in kinds} | (reconnect & kept if action == "stop" else set())
        phases += exact(services, nodes, action, chosen, kept)
    return chain_phases(phases)


UP = frozenset({"start", "reinstall", "reconnect"})
"""Repairs that bring a service up and take nothing down (a reconnect's start leaves a running
service as it is)."""


def up_first(services: Mapping[str, Service], cluster: Cluster) -> set[str]:
    """The nodes a rolling repair does first: those where it only brings services up. Done before
    the nodes where it stops or restarts something, the service has its most members running
    when each batch of those goes down (a NATS node started again before a stale one restarts)."""
    fixes = repairs(services, cluster)
    return {n for n, _ in fixes} - {n for (n, _), r in fixes.items() if r not in UP}


def repairs(services: Mapping[str, Service], cluster: Cluster) -> dict[Pair, str]:
    """Each drifted (node, service) and what the repair runs there: the drift's own repair, except
    that a service failed while something it needs running is down too (a replica whose primary
    died) may have failed for that alone: it is started after that (its `status` check says
    whether it runs again), not installed and configured again. If it still fails then, its
    start fails; a check shows it failed on its own, and the next repair reinstalls it. The rule
    is the read model's (`as_repaired`): the drift every reader shows says what this plans."""
    on_cluster = {s for n in cluster.nodes.values() for s in n.services}
    return {(d.node, d.service): d.repair for d in as_repaired(cluster.drift(), services, on_cluster) if d.repair}
