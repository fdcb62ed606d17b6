"""The vocabulary the tracker's HTTP contract is declared in (`api.py`, `people_api.py`): a
route, a response model's base, a parameter, and the limits and header every route shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from contracts import subjects

TENANT_HEADER = "X-Muster-Tenant"
DEFAULT_TENANT = "default"
UUID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
MAX_LIMIT = 500
MAX_SEQ = 1 << 62
DEFAULT_LIMIT = 50


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _param(name: str, where: str, schema: dict[str, Any], description: str, required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": where, "required": required, "schema": schema, "description": description}


TENANT = _param(TENANT_HEADER, "header", {"type": "string", "pattern": subjects.TOKEN.pattern, "default": DEFAULT_TENANT},
                "The tenant every route is scoped to (default `default`); another tenant's job is a 404. With auth on, "
                "only super admins and services choose it; anyone else may only repeat their own tenant (403 otherwise).")


@dataclass(frozen=True)
class Route:
    path: str
    name: str
    summary: str
    response: type[BaseModel] | None
    params: tuple[dict[str, Any], ...] = ()
    content_type: str = "application/json"
    errors: tuple[int, ...] = (400, 404, 503)
    extra: dict[str, type[BaseModel]] = field(default_factory=dict)
    """Other responses: status -> body model."""


LAST_EVENT_ID = _param("Last-Event-ID", "header", {"type": "string", "pattern": "^[0-9]{1,18}$"},
                       "Resume a stream after this event id (a log sequence), as browsers do on reconnect.")
