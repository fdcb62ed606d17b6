"""Goals of the benchmark figures: each script states its goals next to the figures it measured,
and `run_all.py` collects them, so that `make bench` flags every figure that fell below its goal
(a regression guard that is not a timed test: nothing fails, the miss is printed and written at
the top of docs/benchmarks.md).

A script prints one line `GOALS {"goals": [...]}`; `python bench/<script>.py` alone prints the
same verdicts in its table.
"""

from __future__ import annotations

import json
import operator
from dataclasses import asdict, dataclass

PREFIX = "GOALS "
_OPS = {">=": operator.ge, "<=": operator.le}


@dataclass(frozen=True)
class Goal:
    figure: str
    value: float
    op: str
    """'>=' or '<='"""
    target: float
    unit: str = ""
    """how `value` and `target` read: 'x raw', 'ms', 's'..."""

    @property
    def met(self) -> bool:
        return bool(_OPS[self.op](self.value, self.target))

    def verdict(self) -> str:
        return f"{self.op} {_num(self.target)}{self.unit}: {'meets' if self.met else '**MISSES**'}"


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.2f}".rstrip("0").rstrip(".")


def line(goals: list[Goal]) -> str:
    return PREFIX + json.dumps({"goals": [asdict(g) for g in goals]})


def parse(stdout: str) -> list[Goal]:
    out: list[Goal] = []
    for text in stdout.splitlines():
        if text.startswith(PREFIX):
            out += [Goal(**g) for g in json.loads(text[len(PREFIX):])["goals"]]
    return out
