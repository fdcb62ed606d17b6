"""The planner's own ports (the log, the task queue and the clock are `muster.ports`): where
catalogs come from, and the solver a dry run asks."""

from __future__ import annotations

from typing import Protocol

from contracts.catalog import Catalog
from contracts.events import LayoutRequested
from contracts.layout import Layout
from muster.catalog.store import read_catalog
from muster.ports.eventlog import EventLog


class CatalogSource(Protocol):
    async def load(self, tenant: str) -> Catalog: ...


class LogCatalogs:
    """The tenant's catalog as the log has it (the `catalog` events)."""

    def __init__(self, log: EventLog) -> None:
        self.log = log

    async def load(self, tenant: str) -> Catalog:
        return await read_catalog(self.log, tenant)


class Workers(Protocol):
    async def serving(self, tenant: str, provisioner_class: str) -> int | None:
        """How many live provisioners take this tenant's tasks of this class now (None: the
        presence records could not be read)."""
        ...

    async def holding(self) -> set[str] | None:
        """The attempts (`<job>.<task>.<attempt>`) the live provisioners hold now, as each
        answers (one that does not answer holds nothing as far as anyone can tell); None: the
        presence records could not be read."""
        ...


class NoLayout(Exception):
    """The solver answered: no layout satisfies the request (the message says why)."""


class SolverUnavailable(Exception):
    """No solver answered (none running, or it timed out); the message names what happened."""


class Solver(Protocol):
    async def solve(self, tenant: str, request: LayoutRequested) -> Layout:
        """The layout for a dry run, recorded nowhere; raises NoLayout or SolverUnavailable."""
        ...
