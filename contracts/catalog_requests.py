"""Catalog changes asked of a planner: core NATS request/reply on
`muster.ops.<tenant>.<principal>.catalog-apply` and `...catalog-delete` (docs/client.md,
docs/security.md).

The planner checks the requester's `write` grant on each entity the request changes
(`catalog:<kind>/<name>`, `catalog:*` or the tenant), validates the catalog the change would
leave, and appends it with the requester (the subject's principal, which the server lets no one
else use) as `by`. The answer is `CatalogAnswer` (applied, or refused with every problem) or
`Rejected` (not allowed, bad input, a concurrent change).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter

from contracts.base import DEFERRED
from contracts.catalog import KINDS, NAME_PATTERN

CATALOG_APPLY = "catalog-apply"
CATALOG_DELETE = "catalog-delete"
CATALOG_VERBS = (CATALOG_APPLY, CATALOG_DELETE)


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    requested_by: str = Field(default="anonymous", max_length=128,
                              description="who asks, on a bus without authorization only (else the subject's principal)")


class ApplyCatalog(_Request):
    type: Literal["ApplyCatalog"] = "ApplyCatalog"
    v: Literal[1] = 1
    catalog: dict[str, Any] = Field(description="entities by kind, as `contracts.catalog.Catalog` (the files' content)")
    sources: dict[str, str] = Field(default_factory=dict, description="`<kind>/<name>` -> the file it came from (for messages)")
    dry_run: bool = Field(default=False, description=(
        "checked as an apply is (the requester's grants, the whole catalog it would leave) and answered with what "
        "would change; nothing is written"))


def _known_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; kinds are {', '.join(KINDS)}")
    return kind


class DeleteCatalogEntity(_Request):
    """Delete one entity: `kind` one of the catalog's kinds, `name` as every entity's name is
    made. A request wrong in both is told both."""

    # Both checked here, not by the planner after: a missing `kind` and a NUL in `name` was told
    # of `kind` only (the name was any text, looked up once the kind was known).
    type: Literal["DeleteCatalogEntity"] = "DeleteCatalogEntity"
    v: Literal[1] = 1
    kind: Annotated[str, AfterValidator(_known_kind)] = Field(max_length=64)
    name: str = Field(pattern=NAME_PATTERN, max_length=128)


CatalogRequest = Annotated[ApplyCatalog | DeleteCatalogEntity, Field(discriminator="type")]
CATALOG_REQUEST_ADAPTER: TypeAdapter[Any] = TypeAdapter(CatalogRequest, config=DEFERRED)
VERB_OF = {"ApplyCatalog": CATALOG_APPLY, "DeleteCatalogEntity": CATALOG_DELETE}


class CatalogProblem(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    severity: Literal["error", "warning"]
    file: str = ""
    kind: str = ""
    entity: str = ""
    field: str = ""
    message: str


class CatalogAnswer(BaseModel):
    """What the planner did: `ok` and the changes appended (`seqs` in the log), or not `ok` and
    nothing written, with every problem (an apply) or every reason (a delete in use)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    type: Literal["CatalogAnswer"] = "CatalogAnswer"
    v: Literal[1] = 1
    ok: bool
    changes: list[dict[str, Any]] = Field(default_factory=list, description="kind, name, action, version, fields")
    seqs: list[int] = Field(default_factory=list)
    problems: list[CatalogProblem] = Field(default_factory=list)
    reasons: list[str] = Field(default_factory=list, description="a delete: why the entity is still in use")
    dry_run: bool = Field(default=False, description="an apply's dry run: `changes` would be made, nothing was written")
