"""The planner core's one error type."""

from __future__ import annotations


class PlanError(ValueError):
    """An operation cannot be planned: unknown service or node, a dependency cycle (the message
    names the services), an operation that needs arguments it was not given."""
