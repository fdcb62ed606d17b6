"""A length of time as people type it (pure): the one way the CLI's and the console's governance
lists say a rule's expiry or a subscription's lease warning (`24 h` where `--expires 24h` was
typed; the CLI said `86400 s` and the console `24 h`)."""

from __future__ import annotations

import re

UNITS = (("d", 86400), ("h", 3600), ("min", 60))


def spoken(seconds: float) -> str:
    """The largest unit that divides it exactly (days from two on: a day reads `24 h`); else seconds."""
    for unit, size in UNITS:
        if seconds >= size and seconds % size == 0 and (unit != "d" or seconds >= 2 * size):
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


_PARTS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_TYPED = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
EXAMPLES = "e.g. 3600, 90s, 15m, 2h, 7d"


def parsed(text: str) -> float | None:
    """`90`, `90s`, `15m`, `2h`, `7d` -> seconds; None if it is none of these."""
    match = _TYPED.fullmatch(text.strip())
    return float(match.group(1)) * _PARTS[match.group(2) or "s"] if match is not None else None
