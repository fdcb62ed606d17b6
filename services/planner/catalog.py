"""Catalog changes over the bus (`muster.ops.<tenant>.<principal>.catalog-apply|catalog-delete`,
contracts/catalog_requests.py): the planner checks the requester's grants, validates, and
appends with the requester as `by` (docs/security.md).

Why here and not in the client: a client that appends the catalog's events itself chooses their
`by` and needs JetStream rights a tenant's people must not have (docs/decisions/0009). The
requester is the subject's principal, which the server lets no one else use; it needs `write`
on each entity the request changes (`catalog:<kind>/<name>`, `catalog:*` or the tenant; tenant
admins and super admins hold it). Any planner answers (the catalog is not sharded): two
concurrent changes are kept apart by the catalog's fence on its last sequence, not by a lease.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from pydantic import ValidationError

from contracts import subjects
from contracts.catalog import KINDS, Catalog
from contracts.catalog_requests import (
    CATALOG_REQUEST_ADAPTER,
    VERB_OF,
    ApplyCatalog,
    CatalogAnswer,
    DeleteCatalogEntity,
)
from contracts.commands import Rejected
from contracts.errors import describe_validation_error
from contracts.identity import Scope
from contracts.limits import not_strict_json
from muster.catalog.delete import DeleteRefused, NotInCatalog, delete_entity
from muster.catalog.files import CatalogFileError
from muster.catalog.plugins import PluginField, PluginSpec, PluginSpecs
from muster.catalog.requests import problem_json
from muster.catalog.store import append_changes, check_apply, plan_changes, read_state
from muster.ports.eventlog import EventLog
from services.auth.domain.authz import Decision, how_to_get, may, unmade_tenant
from services.auth.domain.state import IdentityState

TYPE_OF = {verb: kind for kind, verb in VERB_OF.items()}

log = structlog.get_logger("muster.planner")


OfferedPlugins = Callable[[str], Awaitable[list[dict[str, Any]]]]
"""A tenant -> the plugin descriptions (`PluginRegistry.describe()`) its live provisioners registered."""


def offered_specs(known: PluginSpecs, described: list[dict[str, Any]]) -> PluginSpecs:
    """The built-in specs, plus any plugin a live provisioner offers that they lack (one loaded
    with --plugins-dir): a catalog naming it is then accepted."""
    have = {(p.type, p.name) for p in known}
    extra = []
    for d in described:
        kind, name = d.get("type"), d.get("name")
        if kind in ("provider", "automator") and isinstance(name, str) and (kind, name) not in have:
            fields = {f: PluginField(sensitive=bool(v.get("sensitive")), required=bool(v.get("required")))
                      for f, v in (d.get("fields") or {}).items() if isinstance(v, dict)}
            extra.append(PluginSpec(name=name, type=kind, fields=fields))
            have.add((kind, name))
    return PluginSpecs([*known, *extra]) if extra else known


class CatalogWrites:
    def __init__(self, store: EventLog, plugins: PluginSpecs, identity: IdentityState | None = None,
                 offered: OfferedPlugins | None = None) -> None:
        self.store = store
        self.plugins = plugins
        self.identity = identity
        self.offered = offered
        """The identities (auth on), or None on a bus without authorization: no grants to check."""

    async def answer(self, tenant: str, principal: str, verb: str, data: bytes) -> bytes:
        try:
            reply: Any = await self._answer(tenant, principal, verb, data)
        except (CatalogFileError, subjects.SubjectError) as err:  # a concurrent change, too many at once, a bad tenant
            reply = Rejected(reason=str(err), code="conflict")
        except Exception:  # a bug must not leave a requester without an answer
            log.exception("catalog request failed", tenant=tenant, verb=verb)
            reply = Rejected(reason="internal error while handling the catalog request; see the planner's log")
        return bytes(reply.model_dump_json().encode())

    async def _answer(self, tenant: str, principal: str, verb: str, data: bytes) -> CatalogAnswer | Rejected:
        subjects.token(tenant, "tenant")
        if (not_json := not_strict_json(data)) is not None:
            return Rejected(reason=f"not a catalog request: the body {not_json}", code="invalid")
        try:
            body = json.loads(data)
        except ValueError:  # (no body, not JSON: the contract's parse below says so)
            body = None
        if isinstance(body, dict) and "type" not in body:
            # The subject's verb says which request it is, as an operation's does: without `type`
            # it read "Unable to extract tag using discriminator 'type'", naming no field.
            data = json.dumps({"type": TYPE_OF[verb], **body}).encode() if verb in TYPE_OF else data
        try:
            request = CATALOG_REQUEST_ADAPTER.validate_json(data)
        except ValidationError as err:
            return Rejected(reason=f"not a catalog request: {describe_validation_error(err)}", code="invalid")
        if VERB_OF[request.type] != verb:
            return Rejected(reason=f"{request.type} goes to {subjects.OPS}.<tenant>.<principal>.{VERB_OF[request.type]}, not .{verb}",
                            code="invalid")
        # The body's `requested_by` only on an open bus (a principal may be named "anonymous").
        by = request.requested_by if self.identity is None and principal == subjects.ANONYMOUS else principal
        if isinstance(request, DeleteCatalogEntity):
            return await self._delete(tenant, principal, by, request)
        return await self._apply(tenant, principal, by, request)

    def _may_write(self, principal: str, tenant: str, entities: list[tuple[str, str]]) -> Decision:
        if self.identity is None:
            return Decision(True)
        who = self.identity.principals.get(principal)
        unmade = unmade_tenant(who, self.identity.tenants, tenant)
        if unmade:  # as the tracker answers its reads, and the planner a request
            return Decision(False, unmade)
        grants = self.identity.grants_of(principal)
        for kind, name in entities:
            scope = Scope(tenant=tenant, kind="catalog", id=f"{kind}/{name}")
            decision = may(who, grants, "write", scope)
            if not decision:  # with the grant to ask for, as every other refusal of a user says it
                return Decision(False, decision.reason + how_to_get(who, "write", scope, grants))
        return Decision(True)

    async def _apply(self, tenant: str, principal: str, by: str, request: ApplyCatalog) -> CatalogAnswer | Rejected:
        said = "catalog would not be applied (dry run)" if request.dry_run else "catalog not applied"
        unknown = [k for k in request.catalog if k not in KINDS]
        if unknown:
            return Rejected(reason=f"{said}: {unknown_kinds(unknown)}", code="invalid", field=f"catalog.{unknown[0]}")
        try:
            incoming = Catalog.model_validate(request.catalog)
        except ValidationError as err:
            return Rejected(reason=f"{said}: {describe_validation_error(err)}", code="invalid", field="catalog")
        state = await read_state(self.store, tenant)
        # Only what would change needs the grant: unchanged entities of a whole folder are not written.
        allowed = self._may_write(principal, tenant, [(c.kind, c.name) for c in plan_changes(state, incoming)])
        if not allowed:
            return Rejected(reason=f"{said}: {allowed.reason}", code="forbidden")
        sources = {(k.partition("/")[0], k.partition("/")[2]): v for k, v in request.sources.items()}
        plugins = offered_specs(self.plugins, await self.offered(tenant)) if self.offered else self.plugins
        check = check_apply(state, incoming, plugins, sources, log_label=f"catalog of tenant {tenant!r} in the log")
        problems = [problem_json(p) for p in check.errors + check.warnings]
        if request.dry_run:  # what the apply would change, checked as it would be; nothing written
            return CatalogAnswer(ok=check.ok, dry_run=True, changes=[c.to_json() for c in check.changes], problems=problems)
        if not check.ok:
            return CatalogAnswer(ok=False, problems=problems)
        seqs = await append_changes(self.store, tenant, check.changes, state.last_seq, by)
        log.info("catalog applied", tenant=tenant, by=by, changes=len(seqs))
        return CatalogAnswer(ok=True, changes=[c.to_json() for c in check.changes], seqs=seqs, problems=problems)

    async def _delete(self, tenant: str, principal: str, by: str, request: DeleteCatalogEntity) -> CatalogAnswer | Rejected:
        if request.kind not in KINDS:
            return Rejected(reason=f"unknown kind {request.kind!r}; kinds are {', '.join(KINDS)}", code="invalid", field="kind")
        allowed = self._may_write(principal, tenant, [(request.kind, request.name)])
        if not allowed:
            return Rejected(reason=f"not deleted: {allowed.reason}", code="forbidden")
        try:
            seq = await delete_entity(self.store, tenant, request.kind, request.name, by, self.plugins)
        except NotInCatalog as missing:
            return Rejected(reason=str(missing), code="not_found", field="name")
        except DeleteRefused as refused:
            return CatalogAnswer(ok=False, reasons=refused.reasons)
        log.info("catalog entity deleted", tenant=tenant, by=by, kind=request.kind, name=request.name)
        return CatalogAnswer(ok=True, seqs=[seq])


def unknown_kinds(unknown: list[str]) -> str:
    """Kinds the catalog has none of, each with the kind meant where it is a singular (`service`):
    they were left out, and the apply answered ok with nothing changed."""
    said = [f"{k!r} (did you mean {k + 's'!r}?)" if k + "s" in KINDS else repr(k) for k in unknown]
    return f"no catalog kind {', '.join(said)}: the kinds are {', '.join(KINDS)}"
