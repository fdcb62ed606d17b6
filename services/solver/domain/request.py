"""What the solver is asked."""

from __future__ import annotations

from dataclasses import dataclass

from contracts.layout import Layout


@dataclass(frozen=True)
class SolveRequest:
    """`nodes` is the cluster's total after the operation. With `existing`, a larger `nodes`
    expands, a smaller one shrinks, and the same one with `add_services`/`remove_services`
    changes services. `exclude` lists layouts already tried (and failed): the answer differs
    from each of them."""

    template: str
    nodes: int
    services: tuple[str, ...] | None = None
    provider: str | None = None
    hardware: str | None = None
    image: str | None = None
    comparator: str = "default"
    existing: Layout | None = None
    add_services: tuple[str, ...] = ()
    remove_services: tuple[str, ...] = ()
    exclude: tuple[Layout, ...] = ()
