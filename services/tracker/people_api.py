"""The contract of the routes people's reads go through (docs/decisions/0016): the `muster`
commands of a tenant's user, with its own token, read the log, replays, the catalog and the
provisioners here, scoped by the tracker's grants.

Declared like the other routes (`api.py` takes them into its table and the OpenAPI document);
handled in `people.py` and `events.py`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from contracts import subjects
from contracts.catalog import KINDS
from contracts.identity import LOOKUP_PERMISSIONS

from .api_base import LAST_EVENT_ID, TENANT, UUID_PATTERN, Route, _Out, _param

CLUSTER_REF = r"^[A-Za-z0-9_\-]{1,128}$"
"""A cluster's id or its name (names are tokens, like tenants)."""
RELATIVE_SUBJECT = r"^(>|([A-Za-z0-9_\-~]{1,400}|\*)(\.([A-Za-z0-9_\-~]{1,400}|\*))*(\.>)?)$"
"""A subject pattern under `muster.evt.<tenant>.`: tokens or `*`, an optional `>` last."""
MAX_SEQ = 1 << 62


class CatalogVersion(_Out):
    kind: str
    name: str
    version: int


class CatalogView(_Out):
    """The tenant's catalog from the log, the entities the principal may read, secrets masked."""

    tenant: str = Field(description="whose catalog this is (the one asked for, else the token's own, `default` for operators)")
    catalog: dict[str, Any]
    versions: list[CatalogVersion]
    last_seq: int = Field(description="the catalog's last event in the log (0: none yet)")
    complete: bool = Field(description="every entity is shown (false: some need a read grant this principal lacks)")
    hidden: int = Field(0, description="how many entities are not shown (the principal may not read them)")
    note: str | None = Field(None, description="with entities hidden: which grant shows them, as `muster catalog get` "
                                               "and the console say it (a create needs `read` on its template)")


class CatalogEntityVersion(_Out):
    kind: str
    name: str
    version: int
    seq: int
    time: str
    by: str
    changed: list[str]
    entity: dict[str, Any]
    deleted: bool


class CatalogHistory(_Out):
    items: list[CatalogEntityVersion]


class ProvisionerList(_Out):
    """Live provisioners' presence records (`muster provisioners list`). To anyone but super
    admins and services, `info.tenants` names only the asking tenant and `others` counts the rest."""

    items: list[dict[str, Any]]


class HardwareCost(_Out):
    nodes: int = Field(description="the cluster's nodes of this hardware type")
    each: float = Field(description="one node's price an hour at the cluster's provider (0: no price, see `unknown`)")
    per_hour: float


class ClusterCost(_Out):
    name: str
    id: str
    provider: str
    nodes: int
    per_hour: float = Field(description="the cluster's nodes at today's prices, a hardware type without a price counted as 0")
    by_hardware: dict[str, HardwareCost]
    unknown: list[str] = Field(description="its hardware types without a price for its provider (or one the reader may not read)")


class CostView(_Out):
    """What the tenant's live clusters cost an hour at the catalog's prices now: what `muster
    cluster cost --json` prints and the console's clusters page shows."""

    tenant: str
    clusters: list[ClusterCost] = Field(description="its clusters not deleted, by name")
    nodes: int
    per_hour: float = Field(description="the clusters' sum: not complete while `unknown` names a hardware type")
    unknown: list[str] = Field(description="every hardware type counted as 0 for want of a price")
    note: str | None = Field(None, description="with hardware types unknown and catalog entities the reader may not "
                                               "read: which grant shows them")


MODELS: list[type[BaseModel]] = [CatalogView, CatalogHistory, ProvisionerList, CostView]

_RELATIVE = _param("subject", "query", {"type": "string", "pattern": RELATIVE_SUBJECT, "maxLength": 1000},
                   "Events on subjects matching this pattern under `muster.evt.<tenant>.` (`job.*`, `task.<job>.>`; "
                   "default `>`: the whole tenant), or a whole subject of the tenant's log (`muster.evt.<tenant>.job.*`). "
                   "Needs `read` on the tenant.")
_JOB = _param("job", "query", {"type": "string", "pattern": UUID_PATTERN},
              "A job's story (its job, layout and task events). Needs `read` on the job.")
_CLUSTER = _param("cluster", "query", {"type": "string", "pattern": r"^(\*|[A-Za-z0-9_\-]{1,128})$"},
                  "A cluster, by id or name (the live one of that name, else the last deleted): its events and, with "
                  "`jobs`, its jobs'. Needs `read` on the cluster. `*`: every cluster's own events (`read` on every "
                  "cluster; `jobs` does not apply).")
_NEEDS = _param("needs", "query", {"type": "string", "enum": list(LOOKUP_PERMISSIONS), "default": "read"},
                "With `cluster`: what the read is for. A client about to run an operation on the cluster asks for the "
                "operation's permission (`write` for an expand, `execute` for a restart: the CLI does), and is refused "
                "(403) naming that permission and the grant to ask for, not `read` alone.")
_JOBS = _param("jobs", "query", {"type": "boolean", "default": True}, "With `cluster`: its jobs' events too.")
_AFTER = _param("after", "query", {"type": "integer", "minimum": 0, "maximum": MAX_SEQ, "default": 0},
                "Only events after this log sequence.")
_SINCE = _param("since", "query", {"type": "string", "format": "date-time", "maxLength": 64},
                "Only events recorded at or after this time (ISO 8601; UTC if no zone).")
_FOLLOW = _param("follow", "query", {"type": "boolean", "default": False},
                 "Go on with new events as they are recorded (a job's story ends with the job).")
_REPLAY_CLUSTER = _param("cluster", "query", {"type": "string", "pattern": CLUSTER_REF}, "The cluster, by id or name.",
                         required=True)
_SEQ = _param("seq", "query", {"type": "integer", "minimum": 0, "maximum": MAX_SEQ}, "As it was after this log sequence.")
_AT = _param("at", "query", {"type": "string", "format": "date-time", "maxLength": 64},
             "As it was at this time (ISO 8601; UTC if no zone); with `seq` too, at whichever comes first.")
_NAME = _param("name", "query", {"type": "string", "pattern": subjects.TOKEN.pattern}, "The entity's name.", required=True)
_KIND = _param("kind", "query", {"type": "string", "enum": list(KINDS)}, "Only this kind.")
_CLASS = _param("class", "query", {"type": "string", "pattern": subjects.TOKEN.pattern}, "Only provisioners of this class.")
_ALL = _param("all", "query", {"type": "boolean", "default": False},
              "Every live provisioner, whatever tenant it serves (super admins and services only).")

ROUTES: tuple[Route, ...] = (
    Route("/v1/events", "stream_events",
          "The log as server-sent events: one `event` per event (id = log sequence; data = seq, subject, time, type, "
          "aggregate_id, version, event), then `end` (data: `{\"seq\"}`, the log's last sequence when the read "
          "began) once caught up; with `follow`, new events as they are recorded and `: keep-alive` comments. Give "
          "one of `job`, `cluster` and `subject` (given several, the first of these counts; none: `subject=>`).", None, (TENANT, _RELATIVE, _JOB, _CLUSTER, _NEEDS, _JOBS, _AFTER, _SINCE, _FOLLOW, LAST_EVENT_ID),
          content_type="text/event-stream"),
    Route("/v1/replay", "get_replay",
          "A cluster rebuilt from the log as it was at a point (`seq` or `at`; default now), with each of its jobs "
          "as it stood then: what `muster replay --json` prints.", None, (TENANT, _REPLAY_CLUSTER, _SEQ, _AT)),
    Route("/v1/catalog", "get_catalog", "The tenant's catalog: the entities the principal may read, sensitive "
          "fields masked, with their versions.", CatalogView, (TENANT,), errors=(400, 503)),
    Route("/v1/catalog/history", "get_catalog_history",
          "Every version of a catalog entity: when, by whom, which fields changed.", CatalogHistory,
          (TENANT, _NAME, _KIND)),
    Route("/v1/cost", "get_cost", "What the tenant's clusters cost an hour at the catalog's prices now, each by "
          "hardware type and together (`muster cluster cost`). Needs `read` on every cluster of the tenant.", CostView,
          (TENANT,), errors=(400, 503)),
    Route("/v1/provisioners", "list_provisioners", "Live provisioners serving the tenant (or every one, `all`), "
          "from their presence records.", ProvisionerList, (TENANT, _CLASS, _ALL), errors=(400, 503)),
)
