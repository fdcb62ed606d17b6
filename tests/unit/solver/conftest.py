"""Solver unit tests. With `--import-mode=importlib` test folders are not on sys.path, so
this makes the sibling `solver_support` builders importable."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.append(_HERE)

from solver_support import reactor_catalog  # noqa: E402

from contracts.catalog import Catalog  # noqa: E402


@pytest.fixture(scope="session")
def reactor() -> Catalog:
    return reactor_catalog()
