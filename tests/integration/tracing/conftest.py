"""The services' fixture (tests/integration/services) for the traced runs here."""

from __future__ import annotations

import sys
from pathlib import Path

_SERVICES = str(Path(__file__).parents[1] / "services")
if _SERVICES not in sys.path:
    sys.path.append(_SERVICES)

from conftest import stack  # noqa: E402,F401
