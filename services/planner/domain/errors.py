"""The planner core's one error type."""

from __future__ import annotations


class PlanError(ValueError):
    """An operation cannot be planned: unknown service or node, a dependency cycle (the message
    names the services), an operation that needs arguments it was not given. `field`: the
    request's field at fault, when one is (a form shows it there)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def services_named(names: list[str]) -> str:
    """`service a is` / `services a, b are`, for a sentence about them."""
    return f"service {names[0]} is" if len(names) == 1 else f"services {', '.join(names)} are"
