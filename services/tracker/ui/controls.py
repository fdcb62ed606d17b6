"""Which job-control buttons a job's state allows (pure): the states in which the planner takes
each control (`Job.pause`, `resume`, `cancel`, `retry` in the planner's domain). The page shows a
button only then, and its script shows and hides them as the state changes live."""

from __future__ import annotations

CONTROLS: dict[str, tuple[str, ...]] = {
    "pause": ("running", "waiting_for_resources", "rolling_back"),
    "resume": ("paused",),
    "cancel": ("running", "waiting_for_resources", "paused"),
    "retry": ("failed", "rolled_back"),
}


def controls_for(state: str, planned: bool) -> list[str]:
    """The controls a job in `state` takes (retry: only a job that was planned)."""
    return [verb for verb, states in CONTROLS.items() if state in states and (verb != "retry" or planned)]
