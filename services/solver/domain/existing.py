"""Changes to a running cluster (in progress)."""

from __future__ import annotations

from contracts.layout import Layout

from .errors import invalid
from .request import SolveRequest
from .setting import Setting


def solve_existing(setting: Setting, request: SolveRequest) -> Layout:
    raise invalid("changes to existing clusters are not supported yet")
