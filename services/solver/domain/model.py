"""A stage-3 problem with words attached: every row knows what it stands for, so that an
unsolvable problem can be explained in terms of services and numbers."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from .counts import UNBOUNDED, Row, solutions
from .quantities import Bound

Side = Literal["min", "max", "exact"]


@dataclass(frozen=True)
class Limit:
    members: tuple[int, ...]
    lo: int
    hi: int
    side: Side
    text: str
    service: str | None = None
    implied: bool = False
    scales: bool = False

    @property
    def row(self) -> Row:
        return Row(self.members, self.lo, self.hi)


@dataclass(frozen=True)
class CountModel:
    """`shape` rows are given by the request (the node total, existing groups) and always
    hold; `limits` come from the template and are what an explanation names."""

    size: int
    shape: tuple[Limit, ...]
    limits: tuple[Limit, ...]
    # Index in `shape` of the row "this many new nodes", if the model has one, and how many
    # nodes the cluster has besides them: explanations speak of cluster totals.
    total_row: int | None = None
    kept_nodes: int = 0
    # The most new nodes the shape allows at all (a shrink cannot go above the existing nodes).
    max_total: int | None = None

    def with_total(self, total: int) -> CountModel:
        assert self.total_row is not None
        shape = list(self.shape)
        row = shape[self.total_row]
        shape[self.total_row] = Limit(row.members, total, total, row.side, row.text)
        return CountModel(self.size, tuple(shape), self.limits, self.total_row, self.kept_nodes, self.max_total)

    def rows(self, limits: Sequence[Limit] | None = None) -> list[Row]:
        chosen = self.limits if limits is None else limits
        return [limit.row for limit in (*self.shape, *chosen)]

    def solutions(self) -> Iterator[tuple[int, ...]]:
        return solutions(self.size, self.rows())


def service_limits(
    members: tuple[int, ...], service: str, lo: Bound, hi: Bound, have: int, total: int
) -> list[Limit]:
    """The min row and, when it binds at all, the max row of one service, of which `have`
    nodes exist already outside `members`."""
    held = f" ({have} on existing nodes)" if have else ""
    out = []
    if lo.value > have:
        out.append(Limit(members, lo.value - have, UNBOUNDED, "min", lo.text + held, service, lo.implied, lo.scales))
    if hi.value - have < total:
        out.append(Limit(members, 0, hi.value - have, "max", hi.text + held, service, scales=hi.scales))
    return out
