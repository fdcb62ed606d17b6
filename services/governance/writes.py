"""Governance requests (`muster.gov.<tenant>.<principal>.put|delete|list`): check the requester's
rights, validate, and append with the requester as `by` (docs/governance.md).

The requester is the subject's principal, which the server lets no one else use (with auth on;
without it, the body's `requested_by`). Approval rules and policies need the tenant's
administrators; a subscription `read` on the tenant; a schedule the permission its operation
needs on its cluster (`may_operate`), as its owner sends it at every tick and the planner checks
again then (to pause or delete one, its owner needs nothing more: `pause`, `resume` name it and
the service reads it); a schedule made (or given another operation) on a cluster the log does not have, or
has deleted, is refused, as every tick of it would be; a webhook subscription the notifier says it
could not deliver (a secret it lacks, a destination its operator's rule refuses) is refused; a
super admin's request in a tenant no one made is refused (`unmade_tenant`), as the tracker and the
planner refuse it. A put that a concurrent change overtook is validated again on the new state, a few times, before
it is refused.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError

from contracts import subjects
from contracts.commands import COMMAND_ADAPTER, VERB_OF, RejectionCode
from contracts.errors import describe_validation_error
from contracts.governance import GovernanceAnswer, GovernanceRequest, Schedule
from contracts.limits import not_strict_json
from muster.ports.eventlog import ConcurrencyError, EventLog
from muster.readmodel.clusters import fold_cluster
from services.auth.domain.authz import Decision, may, may_govern, may_operate, may_see_schedule, unmade_tenant
from services.auth.domain.state import IdentityState

from .domain.entities import Entry, Put, plan_puts, same_operation
from .domain.operation_text import operation_text
from .domain.schedules import cluster_of, refused_ticks
from .store import append_delete, append_puts, read_entries, read_for_put, with_deliveries, with_ends

TRIES = 3
"""Puts validated again after a concurrent change overtook them (a schedule's tick, another put)."""
PLURAL = {"rule": "rules", "policy": "policies", "subscription": "subscriptions", "schedule": "schedules"}
Vet = Callable[[str, str, list[dict[str, Any]]], Awaitable[GovernanceAnswer | str]]
"""(tenant, requester, subscriptions with a webhook) -> the notifier's check of them (`notify-check`:
the secrets they name, where they send); a string when none checked them, saying why ("no
notifier is running")."""


def schedules_shown(principal: str, tenant: str) -> str:
    """What a listing of only some of the tenant's schedules says (the CLI and HTTP alike)."""
    return (f"only the schedules {principal} owns or may run are listed: every schedule of tenant {tenant} needs "
            "read on the tenant")


def _refused(reason: str, problems: list[str] | None = None, code: RejectionCode = "invalid") -> GovernanceAnswer:
    return GovernanceAnswer(ok=False, reason=reason, problems=problems or [], code=code)


class GovernanceWrites:
    def __init__(self, store: EventLog, identity: IdentityState | None = None, vet: Vet | None = None) -> None:
        self.store = store
        """The event log port (a put is one atomic batch: `append_fenced`)."""
        self.identity = identity
        """The identities (auth on), or None on a bus without authorization: no grants to check."""
        self.vet = vet
        """Asks the notifier about webhook subscriptions before they are stored; None: not asked."""

    async def answer(self, tenant: str, principal: str, verb: str, data: bytes) -> GovernanceAnswer:
        subjects.token(tenant, "tenant")
        if (not_json := not_strict_json(data)) is not None:
            return _refused(f"not a governance request: the body {not_json}")
        try:
            request = GovernanceRequest.model_validate_json(data)
        except ValidationError as err:
            return _refused(f"not a governance request: {describe_validation_error(err)}")
        # The body's `requested_by` only on an open bus: with identities, the subject's principal
        # is the requester even if it is named "anonymous" (a schedule's owner, whom ticks run as).
        by = request.requested_by if self.identity is None and principal == subjects.ANONYMOUS else principal
        unmade = unmade_tenant(self.identity.principals.get(principal), self.identity.tenants, tenant) if self.identity else ""
        if unmade:  # as the tracker answers its reads and the planner a request: a typo wrote where nothing reads back
            return _refused(unmade)
        if verb == "list":
            return await self._list(tenant, principal, request)
        if verb == "delete":
            return await self._delete(tenant, principal, by, request)
        if verb == "put":
            return await self._put(tenant, principal, by, request)
        if verb in ("pause", "resume"):
            return await self._pause(tenant, principal, by, request, verb == "pause")
        return _refused(f"unknown governance verb {verb!r}: put, delete, list, pause or resume")

    # -- rights ---------------------------------------------------------------------------------

    def _may(self, principal: str, tenant: str, kind: str, schedules: list[dict[str, Any]] = ()) -> Decision:  # type: ignore[assignment]
        if self.identity is None:
            return Decision(True)
        who = self.identity.principals.get(principal)
        grants = self.identity.grants_of(principal)
        if kind != "schedule":
            return may_govern(who, grants, tenant, kind)
        for s in schedules:
            cmd = s.get("command", {})
            decision = may_operate(who, grants, tenant, str(s.get("verb")), cmd.get("cluster_id"), cmd.get("job_id"))
            if not decision:
                return Decision(False, f"schedule {s.get('name')!r}: {decision.reason}")
        return Decision(True)

    def _may_stop(self, principal: str, tenant: str, entity: dict[str, Any]) -> Decision:
        """Pausing or deleting a schedule stops requests sent in its owner's name: its owner may,
        whatever its grants now, and so may anyone who may run its operation (as they may make
        it). Neither needs `read` on the tenant (docs/governance.md, "Who may do what")."""
        if self.identity is None or entity.get("owner") == principal:
            return Decision(True)
        return self._may(principal, tenant, "schedule", [entity])

    async def _refused_schedule(self, tenant: str, principal: str, schedule: dict[str, Any], doing: str) -> str:
        """Why `principal` may not pause, resume or delete `schedule`, in one sentence naming the
        schedule, its operation as typed and its cluster by name (session 36: `not paused:
        schedule 'x': alice has no execute permission on cluster <its id>`)."""
        assert self.identity is not None  # (no identities: everything is allowed)
        command = schedule.get("command", {})
        cluster_id, job_id = command.get("cluster_id"), command.get("job_id")
        reason = may_operate(self.identity.principals.get(principal), self.identity.grants_of(principal), tenant,
                             str(schedule.get("verb")), cluster_id, job_id).reason
        if cluster_id:
            cluster = None
            with contextlib.suppress(subjects.SubjectError):
                cluster = fold_cluster(await self.store.read(subjects.cluster_events(tenant, str(cluster_id))))
            if cluster is not None and cluster.name:  # (`muster grant --scope cluster:NAME` takes the name)
                reason = reason.replace(f"cluster {cluster_id}", f"cluster {cluster.name}").replace(
                    f"cluster:{cluster_id}", f"cluster:{cluster.name}")
        operation = f"`{schedule['text']}`" if schedule.get("text") else f"({schedule.get('verb')})"
        name = repr(schedule.get("name"))
        if doing == "resume":  # (its owner too: it runs again in the owner's name)
            return f"{principal} may not resume schedule {name}: resuming it needs what its operation {operation} needs, and {reason}"
        return (f"{principal} may not {doing} schedule {name}, which is {schedule.get('owner')}'s: {doing.removesuffix('e')}ing "
                f"another's schedule needs what its operation {operation} needs, and {reason}")

    def _may_read(self, principal: str, tenant: str) -> Decision:
        if self.identity is None:
            return Decision(True)
        return may_govern(self.identity.principals.get(principal), self.identity.grants_of(principal), tenant, "subscription")

    # -- verbs ----------------------------------------------------------------------------------

    async def _list(self, tenant: str, principal: str, request: GovernanceRequest) -> GovernanceAnswer:
        allowed = self._may_read(principal, tenant)
        if not allowed and request.kind != "schedule":
            return _refused(allowed.reason, code="forbidden")
        entries, _ = await read_entries(self.store, tenant, request.kind)
        items = [e.to_json() for (k, n), e in sorted(entries.items()) if k == request.kind and request.name in (None, n)]
        if request.kind == "subscription":
            items = await with_deliveries(self.store, tenant, items)
        if request.kind == "schedule":
            items = await with_ends(self.store, tenant, items)
        if allowed:
            return GovernanceAnswer(ok=True, items=items)
        # Without `read` on the tenant: the schedules the requester may pause or delete (its
        # own, or one whose operation it may run), as one who may make schedules lists them.
        assert self.identity is not None  # (no identities: every read is allowed)
        who, grants = self.identity.principals.get(principal), self.identity.grants_of(principal)
        asks = functools.partial(may, who, grants)
        return GovernanceAnswer(ok=True, items=[i for i in items if may_see_schedule(principal, asks, tenant, i["entity"])],
                                warnings=[schedules_shown(principal, tenant)])

    async def _delete(self, tenant: str, principal: str, by: str, request: GovernanceRequest) -> GovernanceAnswer:
        if request.name is None:
            return _refused("a delete names the entity (`name`)")
        entries, _ = await read_entries(self.store, tenant, request.kind)
        entry = entries.get((request.kind, request.name))
        if entry is None:
            return _refused(f"no {request.kind} {request.name!r} in tenant {tenant!r}", code="not_found")
        stop = request.kind == "schedule"
        allowed = self._may_stop(principal, tenant, entry.entity) if stop else self._may(principal, tenant, request.kind, [entry.entity])
        if not allowed:
            reason = await self._refused_schedule(tenant, principal, entry.entity, "delete") if stop else f"not deleted: {allowed.reason}"
            return _refused(reason, code="forbidden")
        try:
            seq = await append_delete(self.store, tenant, entry, by)
        except ConcurrencyError:
            return _refused(f"the {request.kind} changed while it was being deleted; nothing was written: run it again",
                            code="conflict")
        return GovernanceAnswer(ok=True, items=[{"kind": request.kind, "name": request.name, "deleted": True, "seq": seq}])

    async def _put(self, tenant: str, principal: str, by: str, request: GovernanceRequest) -> GovernanceAnswer:
        if not request.entities:
            return _refused("a put carries at least one entity (`entities`)")
        for _ in range(TRIES):
            entries, last, versions = await read_for_put(self.store, tenant, request.kind)
            incoming = [self._stamped(tenant, by, request.kind, dict(e), entries) for e in request.entities]
            problems = [p for e in incoming if isinstance(e, str) for p in [e]]
            bodies = [e for e in incoming if isinstance(e, dict)]
            if request.kind == "schedule":
                await self._described(tenant, bodies, entries)
            puts, found = plan_puts(entries, request.kind, bodies, versions)
            problems += found
            if problems:
                return _refused(f"nothing written: {len(problems)} problem{'s' if len(problems) != 1 else ''}", problems)
            allowed = self._may(principal, tenant, request.kind, [p.entity for p in puts])
            if not allowed:
                return _refused(f"not written: {allowed.reason}", code="forbidden")
            problems = await self._clusters_gone(tenant, puts, entries)  # after the rights: no news of clusters to others
            problems, warnings = await self._vetted(tenant, principal, puts, problems)  # also after the rights
            if problems:
                return _refused(f"nothing written: {len(problems)} problem{'s' if len(problems) != 1 else ''}", problems)
            try:
                seqs = await append_puts(self.store, tenant, request.kind, puts, last, by)
            except ConcurrencyError:
                continue
            return GovernanceAnswer(ok=True, warnings=warnings,
                                    items=[{"kind": p.kind, "name": p.name, "version": p.version, "action": p.action,
                                            "seq": seq} for p, seq in zip(puts, seqs, strict=True)])
        return _refused(f"the tenant's {PLURAL[request.kind]} kept changing while this put was being checked; nothing was written: "
                        "run it again", code="conflict")

    async def _pause(self, tenant: str, principal: str, by: str, request: GovernanceRequest, paused: bool) -> GovernanceAnswer:
        """A schedule paused or resumed by its name alone: the service reads it, so the requester
        needs no `read` on the tenant (it did when the CLI read it to put it back). Pausing needs
        what deleting needs (`_may_stop`); resuming makes it run again, so it needs what making it
        needs (its operation's permission). Its operation is kept, so it is not checked again."""
        said = "paused" if paused else "resumed"
        if request.kind != "schedule" or request.name is None:
            return _refused(f"only a schedule is {said}, by its name (`kind`: schedule, `name`)")
        for _ in range(TRIES):
            entries, last, versions = await read_for_put(self.store, tenant, "schedule")
            entry = entries.get(("schedule", request.name))
            if entry is None:
                return _refused(f"no schedule {request.name!r} in tenant {tenant!r}", code="not_found")
            allowed = self._may_stop(principal, tenant, entry.entity) if paused else self._may(principal, tenant, "schedule", [entry.entity])
            if not allowed:
                return _refused(await self._refused_schedule(tenant, principal, entry.entity, "pause" if paused else "resume"),
                                code="forbidden")
            puts, problems = plan_puts(entries, "schedule", [{**entry.entity, "paused": paused}], versions)
            if problems:
                return _refused(f"not {said}: {len(problems)} problem{'s' if len(problems) != 1 else ''}", problems)
            try:
                seqs = await append_puts(self.store, tenant, "schedule", puts, last, by)
            except ConcurrencyError:
                continue
            return GovernanceAnswer(ok=True, items=[{"kind": p.kind, "name": p.name, "version": p.version, "action": p.action,
                                                     "seq": seq} for p, seq in zip(puts, seqs, strict=True)])
        return _refused(f"the schedule kept changing while it was being {said}; nothing was written: run it again", code="conflict")

    async def _described(self, tenant: str, bodies: list[dict[str, Any]], entries: dict[tuple[str, str], Entry]) -> None:
        """A schedule put without `text` (over HTTP, the command as the bus takes it) gets one
        written from its command, its cluster by name (`cluster check web`), as `muster schedule
        create` keeps the words typed: it was listed as its bare verb. A put that keeps its
        operation keeps the text it had."""
        for body in bodies:
            if body.get("text"):
                continue
            old = entries.get(("schedule", str(body.get("name"))))
            if old is not None and same_operation(old.entity, body) and old.entity.get("text"):
                body["text"] = old.entity["text"]
                continue
            command = body["command"]
            cluster = None
            if command.get("cluster_id"):
                try:
                    cluster = fold_cluster(await self.store.read(subjects.cluster_events(tenant, str(command["cluster_id"]))))
                except subjects.SubjectError:
                    cluster = None  # refused by `_clusters_gone`, once the rights are checked
            body["text"] = operation_text(str(body.get("verb")), command, cluster.name if cluster else None)

    async def _clusters_gone(self, tenant: str, puts: list[Put], entries: dict[tuple[str, str], Entry]) -> list[str]:
        """Schedules made, or given another operation, on a cluster the log does not have or has
        deleted, or whose lease they extend while it has none, or that expand (shrink) it to a size
        it has passed (`refused_ticks`): every tick would be refused (the next one at least). One
        that keeps its operation (paused, resumed, retimed) is not checked again."""
        problems = []
        for put in puts:
            old = entries.get((put.kind, put.name))
            if put.kind != "schedule" or (old is not None and same_operation(old.entity, put.entity)):
                continue
            made = Schedule.model_validate(put.entity)
            cluster_id = cluster_of(made)
            if cluster_id is None:
                continue
            try:
                history = await self.store.read(subjects.cluster_events(tenant, cluster_id))
            except subjects.SubjectError as err:
                problems.append(f"schedule {put.name!r}: {err}")
                continue
            refused = refused_ticks(made, history) if history else \
                f"there is no cluster {cluster_id!r} in tenant {tenant!r}: its operation could never run"
            if refused:
                problems.append(f"schedule {put.name!r}: {refused}")
        return problems

    async def _vetted(self, tenant: str, principal: str, puts: list[Put], problems: list[str]) -> tuple[list[str], list[str]]:
        """(problems, warnings) once the notifier checked the webhook subscriptions of a put: it
        alone knows its secrets (the tenant's own and the shared ones) and where webhooks may go.
        Without a notifier to ask, they are written with a warning: the first delivery tells."""
        hooks = [p for p in puts if p.kind == "subscription" and p.entity.get("webhook")]
        if problems or not hooks or self.vet is None:
            return problems, []
        answer = await self.vet(tenant, principal, [p.entity for p in hooks])
        names = ", ".join(repr(p.name) for p in hooks)
        if isinstance(answer, str):
            return [], [f"subscription {names} stored unchecked: {answer}; whether the notifier has the secrets named and "
                        "may send to the webhook is told at the first delivery (`muster notify test NAME` once one runs)"]
        if not answer.ok and not answer.problems:
            return [], [f"subscription {names} stored unchecked: the notifier answered {answer.reason!r}"]
        return list(answer.problems), list(answer.warnings)

    def _stamped(self, tenant: str, by: str, kind: str, body: dict[str, Any],
                 entries: dict[tuple[str, str], Entry]) -> dict[str, Any] | str:
        """What the requester may not choose: a schedule's owner (who made its command), the
        subscription subject's tenant; a problem as a string."""
        if kind == "subscription" and body.get("subject"):
            prefix = f"muster.cb.{tenant}."
            if not str(body["subject"]).startswith(prefix):
                return f"subscription {body.get('name')!r}: its subject must be one of the tenant's, {prefix}…"
        if kind != "schedule":
            return body
        command = body.get("command")
        if not isinstance(command, dict):
            return f"schedule {body.get('name')!r}: `command` must be an operation's command (a JSON object)"
        if "type" not in command:
            typed = _typed(command, body.get("verb"))
            if isinstance(typed, str):
                return f"schedule {body.get('name')!r}: {typed}"
            body["command"] = typed
        old = entries.get(("schedule", str(body.get("name"))))
        same = old is not None and old.entity.get("verb") == body.get("verb") and old.entity.get("command") == body.get("command")
        body["owner"] = old.entity.get("owner", by) if same and old is not None else by
        try:
            parsed = COMMAND_ADAPTER.validate_python({**body["command"], "requested_by": body["owner"]})
        except ValidationError as err:
            return f"schedule {body.get('name')!r}: its command is not an operation: {describe_validation_error(err)}"
        if getattr(parsed, "dry_run", False):  # (it said `... is a DeleteCluster (verb 'delete'), not a run of 'delete'`)
            return (f"schedule {body.get('name')!r}: its command is a dry run (`dry_run`: true), which previews and changes "
                    "nothing; a schedule sends its operation for real at every tick")
        if VERB_OF[parsed.type] != body.get("verb"):
            return f"schedule {body.get('name')!r}: its command is a {parsed.type} (verb {VERB_OF[parsed.type]!r}), not a run of {body.get('verb')!r}"
        return body


TYPE_OF = {verb: kind for kind, verb in VERB_OF.items()}


def _typed(command: dict[str, Any], verb: Any) -> dict[str, Any] | str:
    """A schedule's command without its `type`, typed by the schedule's `verb` (`{"verb": "check",
    "command": {"cluster_id": ...}}` over HTTP); else what is missing, with the types a schedule
    takes: pydantic said "Unable to extract tag using discriminator 'type'"."""
    if isinstance(verb, str) and verb in TYPE_OF:
        return {**command, "type": TYPE_OF[verb]}
    given = f" (its verb {verb!r} is none of muster's)" if verb else ""
    return (f"its command has no `type`{given}: give the command's type (CheckCluster, RestartServices, ExtendLease, ...: "
            f"one of {', '.join(sorted(TYPE_OF.values()))}), or the schedule's `verb` (check, restart, extend-lease, ...)")
