"""Bus unit tests. With `--import-mode=importlib` test folders are not on sys.path, so this makes
the sibling `histories` builder importable (the name is unique in tests/)."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.append(_HERE)
