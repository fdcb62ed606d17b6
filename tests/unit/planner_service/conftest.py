"""Unit tests of the planner's service layer on in-memory fakes of its ports. With
`--import-mode=importlib` test folders are not on sys.path, so this makes the sibling
`planner_harness` importable (the name is unique in tests/)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.append(_HERE)

from planner_harness import Harness  # noqa: E402


@pytest.fixture
def h() -> Harness:
    return Harness()
