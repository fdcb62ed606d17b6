"""The layout solver's pure core: no IO, no logging, no asyncio; deterministic.

Stage 1 (`service_sets`): which services may share a node. Stage 2 (`node_layouts`): which
hardware and image each such set runs on, one layout per set, in the comparator's order.
Stage 3 (`counts`): how many nodes of each layout, the lexicographically greatest valid
vector, found by an exact search. `existing` handles changes to a running cluster.
"""

from .errors import SolveError
from .request import SolveRequest
from .solve import solve

__all__ = ["SolveError", "SolveRequest", "solve"]
