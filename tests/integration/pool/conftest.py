"""Pool integration tests: makes the sibling `pool_env` importable by its bare name (see
tests/unit/planner/conftest.py for why) and offers its fixtures."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.append(_HERE)

from pool_env import env, pipeline, strict_env  # noqa: E402  (fixtures, found by pytest here)

__all__ = ["env", "pipeline", "strict_env"]
