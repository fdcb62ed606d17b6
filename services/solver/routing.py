"""The solver's routing tables: everything it listens to, in one place.

`ROUTES`: the durable consumer on the log and which handler takes each event type (`grep` an
event's name to see its consumers; other types on the subjects are acknowledged and ignored).
`REPLIES`: the request/reply subjects it answers. Every solver joins the queue group `solvers`,
so each request reaches one of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts import subjects
from muster.routing import Route

ROUTES = (
    Route("solvers", subjects.ALL_LAYOUT_EVENTS, {
        "LayoutRequested": "on_layout_requested",
    }, queue="solvers"),
)


@dataclass(frozen=True)
class Reply:
    subject: str
    handler: str
    """The name of the `SolverService` method that answers."""
    queue: str = "solvers"


REPLIES = (
    Reply(subjects.ALL_SOLVE_REQUESTS, "on_solve_request"),  # dry runs: answered, recorded nowhere
)
