"""The governance page's forms (docs/ui.md, `/ui/governance`): make or change an approval rule, a
Rego policy, a notification subscription or a schedule from the console.

Until session 37 the page listed them and paused, tested or deleted them, and a tenant admin made
them with the CLI or a raw PUT.

Each form is sent as the signed-in person through the API's own route (`PUT
/v1/governance/{what}/{name}`, `writes.submit`, on the viewer's own token), so the governance
service checks the rights, compiles and checks a policy, parses a schedule's timing, has the
notifier vet a webhook, and records the viewer as `by`; nothing is written on a refusal, and
each problem it names is shown at the field it names (govformdata.field_of). Posts carry the
page's CSRF token and must come from the console's own pages, as every console write. A form is
shown only to who may use it (`may_make`); shown is not decided: a post from anyone else is
refused by the service, in its words.

A webhook's signing secret (a `secret://NAME` reference; a secret in clear is refused) is never
shown back: not on a refused form, not on an edit (blank keeps the stored one). A schedule's
form previews the times it would run, if saved now, and the operation it would send, in words,
without writing anything.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from aiohttp import web

from services.governance.domain.entities import RULE_OPERATIONS
from services.governance.domain.operation_text import operation_text

from .. import csrf
from ..governance import listing
from ..write_routes import ACTING
from ..writes import Actor, Written, submit
from . import govformdata as data
from .forms import Refused, _form, _refused
from .governance import ROUTES, SAID_KEY, acts, live_clusters, may_make, schedule_ops
from .kit import NotAllowed, NotFound, page, redirect, render, tracker_of
from .session import Viewer, session_token

NEW = {"rules": {"expires": "24h"}, "policies": {}, "subscriptions": {"target": "webhook", "format": "muster", "lease_warning": "1h"},
       "schedules": {"operation": "check", "timezone": "UTC", "missed": "once"}}
"""A new form's values besides empty ones."""


def add_routes(r: web.UrlDispatcher) -> None:
    """Before the page's buttons (`/ui/governance/{what}/{name}/{verb}`), which would take `edit` for a verb."""
    r.add_get("/ui/governance/{what}/new", new)
    r.add_get("/ui/governance/{what}/{name}/edit", edit)
    r.add_post("/ui/governance/{what}/save", save)


def _what(request: web.Request) -> str:
    what = request.match_info["what"]
    if what not in data.KIND_OF:
        raise NotFound(f"The governance page makes rules, policies, subscriptions and schedules; not {what[:40]!r}.")
    return what


def _not_allowed(viewer: Viewer, what: str) -> NotAllowed:
    needs = {"rules": "the tenant's administrators (a tenant admin, or grant on the tenant)",
             "policies": "the tenant's administrators (a tenant admin, or grant on the tenant)",
             "subscriptions": f"read on the tenant (a tenant admin can give it: muster grant {viewer.name} read --scope tenant)",
             "schedules": "the permission its operation needs on a cluster you may read (check and restart: execute; repair, "
                          "expand, shrink, extend-lease: write)"}[what]
    return NotAllowed(f"{viewer.name} may not make {what} in tenant {viewer.tenant}: that needs {needs}.")


@page
async def new(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    what = _what(request)
    clusters = live_clusters(request, viewer)
    if not may_make(viewer, what, clusters):
        raise _not_allowed(viewer, what)
    values = {**data.posted(what, {}), **NEW[what]}
    return _form_page(request, viewer, what, values, {}, clusters)


@page
async def edit(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    what, name = _what(request), request.match_info["name"]
    old = await _stored(request, viewer, what, name)
    if old is None:
        raise NotFound(f"There is no {data.KIND_OF[what]} {name[:64]!r} in tenant {viewer.tenant}.")
    return _form_page(request, viewer, what, data.values_of(what, old["entity"]), {}, live_clusters(request, viewer), editing=old)


async def _stored(request: web.Request, viewer: Viewer, what: str, name: str) -> dict[str, Any] | None:
    """The entity as listed, if the viewer may act on it (as the page shows its buttons): one it
    may not see is answered as one the tenant has not."""
    kind = data.KIND_OF[what]
    found = [i for i in await listing(tracker_of(request).store, viewer.tenant, kind) if i["name"] == name]
    return found[0] if found and acts(viewer)(kind, found[0]) else None


def _form_page(request: web.Request, viewer: Viewer, what: str, values: dict[str, Any], errors: dict[str, str],
               clusters: list[dict[str, Any]], status: int = 200, editing: dict[str, Any] | None = None,
               preview: dict[str, Any] | None = None) -> web.Response:
    choices: list[tuple[str, str]] = [(c["id"], c.get("name") or c["id"]) for c in clusters]
    if values.get("cluster") and values["cluster"] not in {c for c, _ in choices}:  # (an edit's cluster, deleted since)
        choices.append((values["cluster"], values["cluster"]))
    ops = schedule_ops(viewer, clusters) if what == "schedules" else []
    if what == "schedules" and values.get("operation") and values["operation"] not in ops:
        ops.append(values["operation"])  # (an edit keeps its operation, whoever may run it: the service decides)
    return render(request, "governance_form.html", viewer, status, what=what, kind=data.KIND_OF[what], title=data.TITLE[what],
                  values=values, errors=errors, editing=editing, preview=preview, clusters=choices, ops=ops,
                  scheduled=data.SCHEDULED, rule_operations=RULE_OPERATIONS, kinds=data.KINDS)


@page
async def save(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    what = _what(request)
    try:
        form = await _form(request, viewer)
    except Refused as err:
        return _refused(request, viewer, err)
    kind, editing = data.KIND_OF[what], data.one(form, "editing")
    name = editing or data.one(form, "name")
    clusters = live_clusters(request, viewer)
    old = await _stored(request, viewer, what, editing) if editing else None
    errors: dict[str, str] = {}
    if editing and old is None:
        errors["form"] = f"there is no {kind} {editing!r} in tenant {viewer.tenant} any more (deleted meanwhile?): make it anew"
    kept = (old["entity"].get("webhook") or {}).get("secret") if old is not None and what == "subscriptions" else None
    body, found = data.body_of(what, form, kept)
    errors = {**found, **errors}
    if not name:
        errors["name"] = "give it a name: 1 to 64 letters, digits, '-' and '_'"
    elif not editing and any(i["name"] == name for i in await listing(tracker_of(request).store, viewer.tenant, kind)):
        # A form that makes one does not replace another silently (a PUT would): its Edit does.
        errors["name"] = f"tenant {viewer.tenant} has a {kind} {name!r} already: change it with its Edit, or give another name"
    preview = None
    if what == "schedules":
        if old is not None:
            body["paused"] = bool(old["entity"].get("paused"))  # (an edit is not a resume: the page's Resume is)
        preview = _preview(body, old, errors, clusters)
        if data.one(form, "step") == "preview" and not errors:
            return _form_page(request, viewer, what, data.posted(what, form), {}, clusters, editing=old, preview=preview)
    if errors:
        return _form_page(request, viewer, what, data.posted(what, form), errors, clusters, 422, old, preview)
    written = await submit(tracker_of(request), request.app[ACTING], Actor(viewer.tenant, viewer.name, session_token(request), viewer.may),
                           ROUTES[f"put_{kind}"], {"name": name}, body)
    if not written.ok:
        refused = _at_fields(what, written, data.one(form, "secret"))
        return _form_page(request, viewer, what, data.posted(what, form), refused, clusters, written.status, old, preview)
    said = _done(kind, name, written.body)
    seal = csrf.seal(session_token(request), viewer.tenant, SAID_KEY, said)
    return redirect(f"/ui/governance?said={quote(said)}&seal={seal}&made={quote(what, safe='')}/{quote(name, safe='')}"
                    f"#{kind}-{quote(name, safe='')}")


def _preview(body: dict[str, Any], old: dict[str, Any] | None, errors: dict[str, str],
             clusters: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A schedule's next runs if saved now (its ticks count from its creation when an edit keeps
    its timing, else from now) and its operation in words; its timing's errors added to `errors`."""
    keeps = old is not None and all(old["entity"].get(k) == body.get(k) for k in ("cron", "every_s", "timezone"))
    since = datetime.fromisoformat(old["created_at"]) if keeps and old is not None else None
    runs, wrong = data.next_runs(body, datetime.now(UTC), since)
    for field, said in wrong.items():
        errors.setdefault(field, said)
    command = body.get("command") or {}
    names = {c["id"]: c.get("name") for c in clusters}
    text = operation_text(str(body.get("verb") or ""), command, names.get(str(command.get("cluster_id")))) if body.get("verb") else ""
    return {"runs": [r.isoformat() for r in runs], "text": text} if runs or text else None


def _at_fields(what: str, written: Written, secret: str) -> dict[str, str]:
    """Each problem of a refusal at its field (one refused for its rights, above the form), with
    what was typed as a secret never said back."""
    errors: dict[str, list[str]] = {}
    problems = written.problems
    if len(problems) > 1 or problems[0][0] is None and written.status == 422:
        errors["form"] = [f"nothing written: {len(problems)} problem{'s' if len(problems) != 1 else ''}, each at its field below"]
    for parameter, message in problems:
        field = "form" if written.status in (401, 403, 503) else data.field_of(what, parameter, message)
        errors.setdefault(field, []).append(message.replace(secret, "…") if len(secret) >= 4 else message)
    return {field: "; ".join(said) for field, said in errors.items()}


def _done(kind: str, name: str, answer: dict[str, Any]) -> str:
    """A put's answer in words, as the CLI says it, with the service's warnings."""
    items = answer.get("items") or []
    said = (f"{kind} {name} {'added' if items[0].get('action') == 'add' else 'changed'} (version {items[0].get('version')})"
            if items else f"{kind} {name} unchanged: nothing written")
    return "; ".join([said, *(f"warning: {w}" for w in answer.get("warnings") or [])])
