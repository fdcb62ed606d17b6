"""Pool unit tests: makes the sibling `pool_support` builders importable (see
tests/unit/planner/conftest.py for why)."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.append(_HERE)
