"""Reading a secrets file (docs/secrets.md): a JSON object of provider name -> fields, and named
secrets under `@secrets`. The provisioners and the notifier read one at start."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from muster.cli_support import CliError


def load_secrets(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise CliError(f"cannot read secrets file {path}: {err}") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise CliError(f"secrets file {path} must be a JSON object of provider name -> field map")
    return data
