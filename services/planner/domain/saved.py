"""Saved plans (pure): what binds a dry run's plan to the state it was made on, so that
`ApplyPlan` runs exactly that plan or is refused (Terraform's saved plan, Nomad's check-index).

A dry run records `PlanSaved`: the request, the solver's layout, the cluster's version (its
count of events), a digest of the catalog, and a digest of the plan. Applying it derives the
plan again from the same request and layout (planning is deterministic) on a cluster and
catalog that must still be at those versions, and checks the digest: what runs is what was
shown, task for task.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from contracts.catalog import Catalog
from contracts.events import PlanSaved
from contracts.layout import Layout, NodeSpec

from .admission import Refused
from .cluster import Cluster
from .plan import Plan


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def catalog_version(catalog: Catalog) -> str:
    """The catalog's content, digested: equal digests, equal catalogs (whatever the log did)."""
    return _digest(catalog.model_dump(mode="json"))[:16]


def plan_digest(operation: str, plan: Plan, target: Sequence[NodeSpec]) -> str:
    compact = plan.to_compact_json()
    return _digest({"operation": operation, "tasks": compact["tasks"], "links": compact["links"],
                    "nodes": [n.model_dump(mode="json") for n in target]})


def save(*, tenant: str, job_id: str, cluster_id: str, operation: str, command: Any, layout: Layout | None,
         cluster_version: int, catalog: str, digest: str, tasks: int, by: str) -> PlanSaved:
    """The event of a dry run's plan. Its id is derived from what it binds, so the same dry run
    (same request id, same versions) saves one plan, however often it is asked."""
    plan_id = _digest([tenant, job_id, digest, cluster_version, catalog])[:20]
    request = {**command.model_dump(mode="json", exclude={"dry_run", "if_version"}), "requested_by": by}  # (as a job's: planning.new_job)
    return PlanSaved(plan_id=plan_id, job_id=job_id, cluster_id=cluster_id, operation=operation, command=request,
                     layout=layout, cluster_version=cluster_version, catalog_version=catalog, digest=digest,
                     tasks=tasks, by=by)


def check_unchanged(saved: PlanSaved, cluster: Cluster | None, catalog: str) -> None:
    """Refuse a saved plan whose cluster or catalog moved on since the dry run."""
    version = cluster.version if cluster is not None else 0
    if version != saved.cluster_version:
        raise Refused(f"plan {saved.plan_id} was made on cluster {saved.cluster_id!r} at version {saved.cluster_version}; "
                      f"it is at version {version} now: make a new plan (dry run) and review it", code="stale", field="plan_id")
    if catalog != saved.catalog_version:
        raise Refused(f"plan {saved.plan_id} was made with catalog {saved.catalog_version}; the catalog changed since "
                      f"({catalog}): make a new plan (dry run) and review it", code="stale", field="plan_id")


def check_digest(saved: PlanSaved, digest: str) -> None:
    if digest != saved.digest:  # planning is deterministic: a bug, or an input we did not bind
        raise Refused(f"plan {saved.plan_id} would not run as it was shown (its plan derives differently now); "
                      "make a new plan (dry run)", code="stale", field="plan_id")
