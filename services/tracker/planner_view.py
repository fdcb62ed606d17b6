"""What a tenant's people see of a planner (pure): "a planner", not its instance name
(`planner-<host>-<pid>`, a detail of the deployment, as a provisioner's host and process id
are: provisioner_view.py). Super admins and services see the name: they run the deployment.

The name is in a job's status and location (`owner`), in the jobs' lists (the tenant's, a cluster's), and in the events
that say who owns a job (`JobRequested.planner`, `JobAdopted.planner` and `previous`), which
`/v1/events`, `/v1/jobs/{id}/events`, the progress stream and the console's pages read; and in
the planners' queues the console's provisioners page shows (ui/reads.py). So are the solver's
(`LayoutSolved.solver`, `LayoutUnsolvable.solver`: `solver-<host>-<pid>`, which `muster history`
and `watch` showed a tenant's people beside each layout until session 32) and the governance
service's (`ScheduleFired.scheduler`): "a solver", "a scheduler"."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from contracts.records import Recorded
from services.auth.domain.state import Principal

PLANNER = "a planner"
SOLVER = "a solver"
SCHEDULER = "a scheduler"
FIELDS = {"JobRequested": ("planner",), "JobAdopted": ("planner", "previous"), "LayoutSolved": ("solver",),
          "LayoutUnsolvable": ("solver",), "ScheduleFired": ("scheduler",)}
"""The events that name a service's instance, and where."""
_WORDS = {"planner": PLANNER, "previous": PLANNER, "solver": SOLVER, "scheduler": SCHEDULER}


def sees_deployment(principal: Principal) -> bool:
    """May see how muster is deployed (instance names, hosts, process ids)."""
    return principal.is_super_admin or principal.role == "service"


def _neutral(value: Any, field: str = "planner") -> Any:
    return _WORDS[field] if value else value


def status_for(status: dict[str, Any]) -> dict[str, Any]:
    """A job's status, location or summary (`owner`) as the tenant's people see it."""
    return {**status, "owner": _neutral(status["owner"])} if "owner" in status else status


def event_for(data: dict[str, Any]) -> dict[str, Any]:
    """An event as the tracker serves it (`event_json`), as the tenant's people see it."""
    names = FIELDS.get(str(data.get("type")))
    if not names:
        return data
    return {**data, "event": {**data["event"], **{n: _neutral(data["event"].get(n), n) for n in names}}}


def recorded_for(r: Recorded) -> Recorded:
    """A recorded event as the tenant's people see it (for what folds it: timelines, progress)."""
    names = FIELDS.get(r.type)
    if not names:
        return r
    return replace(r, event=r.event.model_copy(update={n: _neutral(getattr(r.event, n, ""), n) for n in names}))
