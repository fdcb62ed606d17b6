"""The routing tables say who consumes which event, and docs/bus.md says the same: every event
of the contracts is listed once with its consumers, and each consumer named there is a durable
whose routing table takes that event (and the other way round)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

from contracts.events import EVENT_TYPES
from muster.readmodel import locations
from services.notifier.routing import ROUTES as NOTIFIER_ROUTES
from services.planner.routing import ROUTES as PLANNER_ROUTES
from services.pool.routing import ROUTES as POOL_ROUTES
from services.solver.routing import ROUTES as SOLVER_ROUTES
from services.tracker.routing import ROUTES as TRACKER_ROUTES

BUS_MD = Path(__file__).parents[2] / "docs" / "bus.md"
ROUTES: tuple[Any, ...] = (*PLANNER_ROUTES, *SOLVER_ROUTES, *TRACKER_ROUTES, *POOL_ROUTES, *NOTIFIER_ROUTES)


def _documented() -> dict[str, set[str]]:
    text = BUS_MD.read_text()
    section = text[text.index("## Every event: who writes it, who consumes it"):]
    section = section[:section.index("\n## ")] if "\n## " in section else section
    # event | subject | written by | consumed by | also read by (later cells may hold more `|`)
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in section.splitlines() if line.startswith("| `")]
    events = [row[0].strip("`") for row in rows]
    assert len(events) == len(set(events)), "an event is listed twice"
    return {event: set(re.findall(r"`([\w-]+)`", row[3])) for event, row in zip(events, rows, strict=True)}


def test_docs_bus_md_lists_every_event_once() -> None:
    assert set(_documented()) == set(EVENT_TYPES)


def test_the_consumers_docs_bus_md_names_are_the_routing_tables() -> None:
    routed: dict[str, set[str]] = {t: set() for t in EVENT_TYPES}
    for route in ROUTES:
        for event_type in route.handlers:
            assert event_type in EVENT_TYPES, f"{route.durable} routes {event_type}, which is no event"
            routed[event_type].add(route.durable)
    assert _documented() == routed


def test_every_handler_a_table_names_exists() -> None:
    from services.notifier.app import Notifier
    from services.planner.app import Planner
    from services.pool.app import PoolService
    from services.solver.service import SolverService
    from services.tracker.routing import IndexFeeder

    for routes, service in ((PLANNER_ROUTES, Planner), (SOLVER_ROUTES, SolverService), (TRACKER_ROUTES, IndexFeeder),
                            (POOL_ROUTES, PoolService), (NOTIFIER_ROUTES, Notifier)):
        for route in routes:
            for event_type, name in route.handlers.items():
                assert callable(getattr(service, name, None)), f"{route.durable}: {event_type} -> {service.__name__}.{name}"


def test_the_tracker_routes_exactly_the_events_that_move_a_location() -> None:
    (route,) = TRACKER_ROUTES
    in_cases = {t for line in inspect.getsource(locations.updates_from).splitlines() if line.strip().startswith("case ")
                for t in re.findall(r'"(\w+)"', line)}
    assert set(route.handlers) == locations.LOCATION_EVENTS == in_cases
