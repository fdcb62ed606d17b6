"""How a schedule's operation reads for people (pure): `cluster restart web --services hbase
--rolling {"batch":1}`.

`muster schedule create ... -- cluster check web` keeps the words typed (`text`); a schedule put
over HTTP carries the command as the bus takes it, often with no `text`, and was listed as its
bare verb (`check`): not what it would do, nor to what. This writes one from the command: the
command's noun and verb, the cluster (its name when the caller knows it, else its id) or the job,
then every field the request sets away from its default, as an option."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from contracts.commands import COMMAND_ADAPTER, JOB_VERBS

LIMIT = 500
"""A schedule's `text` is at most this long (contracts.governance.Schedule)."""
_NAMED = {"type", "v", "request_id", "requested_by", "dry_run", "cluster_id", "job_id"}


def _value(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
        return ",".join(_value(v) for v in value)
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


def _set(command: Mapping[str, Any]) -> dict[str, Any]:
    """The fields the request sets away from their defaults (all of them if it does not parse)."""
    try:
        parsed = COMMAND_ADAPTER.validate_python({**command, "requested_by": "anonymous"})
    except ValidationError:
        return dict(command)
    return dict(parsed.model_dump(mode="json", exclude_defaults=True))


def operation_text(verb: str, command: Mapping[str, Any], cluster: str | None = None) -> str:
    """The operation as a command line would say it; `cluster`: its name, if known."""
    fields = _set(command)
    if verb in JOB_VERBS:
        words = ["job", verb, str(command.get("job_id", ""))]
    elif verb == "create":
        words = ["cluster", "create", str(fields.pop("name", ""))]
    else:
        words = ["cluster", verb, cluster or str(command.get("cluster_id", ""))]
    for key, value in fields.items():
        if key in _NAMED or value in (None, False, "", [], {}):
            continue
        words.append("--" + key.replace("_", "-"))
        if value is not True:
            words.append(_value(value))
    text = " ".join(w for w in words if w)
    return text if len(text) <= LIMIT else text[: LIMIT - 1] + "…"
