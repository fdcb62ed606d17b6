"""The solver's entry point: one request in, one layout (or a SolveError) out."""

from __future__ import annotations

from contracts.catalog import Catalog
from contracts.layout import Layout

from .create import solve_create
from .errors import invalid
from .existing import solve_existing
from .request import SolveRequest
from .setting import resolve_setting


def solve(catalog: Catalog, request: SolveRequest) -> Layout:
    """Pure and deterministic: the same catalog and request give the same layout."""
    setting = resolve_setting(catalog, request)
    if request.existing is not None:
        return solve_existing(setting, request)
    if request.add_services or request.remove_services:
        raise invalid("add-services and remove-services need an existing cluster")
    return solve_create(setting, request)
