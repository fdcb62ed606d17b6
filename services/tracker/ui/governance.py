"""The console's governance (docs/governance.md): approve or reject a job that waits for
approval from its page (the plan is the page's task graph), and the tenant's schedules (with
their last and next runs), approval rules, policies, subscriptions and denied requests.

Each listed entity has the buttons of what the viewer may do with it, each the API's write
route sent as the viewer (`writes.submit`, as the cluster forms): a schedule's Pause, Resume and
Delete (`muster schedule pause|resume|delete`) to whom may pause or delete it (its owner, or who
may run its operation); a rule's and a policy's Delete to the tenant's administrators; a
subscription's Test and Delete (`muster notify test|remove`) to readers of the tenant. The
governance service (the notifier for a test) decides and says why when it refuses; its answer
is said at the page's top (sealed, as a job page's decision). Until session 36 the page only
listed them: a schedule was paused from the CLI or over HTTP alone. A Delete asks first, on the
page, saying what the delete takes away (deleting a rule lets what it held run without
approval): the post that deletes carries `confirm` = the name, as the cluster form's delete does.
The forms that make and change each kind (New, Edit) are govforms.py's; which of them the viewer
is offered is decided here (`makes`), next to its buttons (`acts`).

A policy stored before a check `muster policy apply` makes now denies every operation it judges
(decision 49): the page says which, at its top and at the policy, with the checks it fails and
the command that deletes it (`muster policy list` warns in the same words).

A decision is the same request `muster job approve|reject` sends (Check: `approve --dry-run`), on a connection opened with
the signed-in person's own token (decision 17, as job control); the planner checks the
`approve` permission and says why when it refuses.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from aiohttp import web

from contracts.commands import MAX_COMMENT_CHARS, Accepted, ApproveJob, DryRun, RejectJob
from contracts.errors import too_long_text
from contracts.identity import OPERATION_PERMISSIONS, Permission, Scope
from muster.client import MusterClient, NoAnswer
from muster.readmodel.cost import rate, type_changes, unpriced
from services.auth.domain.authz import may_see_schedule
from services.governance.domain import stored

from .. import csrf
from ..acting import ActingBus, TokenRefused
from ..governance import denials, listing
from ..write_api import GOVERNANCE_WRITES
from ..write_routes import ACTING
from ..writes import Actor, submit
from . import reads
from .govformdata import SCHEDULED
from .kit import page, redirect, render, said_at, signed_out, tracker_of
from .live import error, job_form
from .session import NeedsSignIn, Viewer, same_origin, session_token, viewer_of

DECIDE_TIMEOUT_S = 10.0


@page
async def governance(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    store = tracker_of(request).store
    if viewer.may is not None and not viewer.may("read", Scope(tenant=viewer.tenant)):
        # Without `read` on the tenant: the schedules the viewer may pause or delete (its own, or
        # one whose operation it may run), as `muster schedule list` shows them; nothing else.
        may = viewer.may
        mine = [s for s in await listing(store, viewer.tenant, "schedule")
                if may_see_schedule(viewer.name, may, viewer.tenant, s["entity"])]
        return render(request, "governance.html", viewer, partial=f"muster grant {viewer.name} read --scope tenant",
                      schedule=mine, rule=[], policy=[], subscription=[], denied=[], said=said_of(request, viewer),
                      acts=acts(viewer), confirming=confirming(request), makes=makes(request, viewer), made=None)
    lists: dict[str, Any] = {kind: await listing(store, viewer.tenant, kind) for kind in ("schedule", "rule", "policy", "subscription")}
    lists["policy"] = [{**p, "failing": failing(p)} for p in lists["policy"]]
    return render(request, "governance.html", viewer, partial=None, denied=await denials(store, viewer.tenant, 20),
                  said=said_of(request, viewer), acts=acts(viewer), confirming=confirming(request), makes=makes(request, viewer),
                  made=made(request, lists["subscription"], acts(viewer)), **lists)


def made(request: web.Request, subscriptions: list[dict[str, Any]], verbs: Any) -> str | None:
    """The subscription a form just made (`?made=subscriptions/NAME`), to test from the page's
    notice: only one listed that the viewer may test (the post is checked as any other)."""
    what, _, name = request.query.get("made", "").partition("/")
    listed = next((s for s in subscriptions if s["name"] == name), None) if what == "subscriptions" else None
    return name if listed is not None and "test" in verbs("subscription", listed) else None


def live_clusters(request: web.Request, viewer: Viewer) -> list[dict[str, Any]]:
    """The clusters a schedule may name: not deleted, and readable by the viewer."""
    return [c for c in reads.clusters(tracker_of(request), viewer.tenant)
            if c.get("status") != "deleted" and viewer.may_cluster("read", c["id"])]


def schedule_ops(viewer: Viewer, clusters: list[dict[str, Any]]) -> list[str]:
    """The operations the schedule form offers the viewer: those it may run on at least one of
    `clusters` (the governance service checks the pair)."""
    return [op for op in SCHEDULED if any(viewer.may_cluster(OPERATION_PERMISSIONS[op], c["id"]) for c in clusters)]


def may_make(viewer: Viewer, what: str, clusters: list[dict[str, Any]]) -> bool:
    """Whether the viewer is offered the form that makes (or edits) one (docs/governance.md, "Who
    may do what"): rules and policies for the tenant's administrators (`grant` on it),
    subscriptions for its readers, a schedule for who may run an operation on one of its clusters."""
    if what == "schedules":
        return bool(schedule_ops(viewer, clusters))
    permission: Permission = "grant" if what in ("rules", "policies") else "read"
    return viewer.may is None or bool(viewer.may(permission, Scope(tenant=viewer.tenant)))


def makes(request: web.Request, viewer: Viewer) -> dict[str, bool]:
    """Which of the page's forms (New rule, New policy, ...) the viewer is offered."""
    clusters = live_clusters(request, viewer)
    return {what: may_make(viewer, what, clusters) for what in ("schedules", "rules", "policies", "subscriptions")}


SAID_KEY = "governance"
"""What the page's answers are sealed for (csrf.seal's job id): this page's, not a job's."""

ACTIONS: dict[tuple[str, str], str] = {
    ("schedules", "pause"): "pause_schedule", ("schedules", "resume"): "resume_schedule",
    ("schedules", "delete"): "delete_schedule", ("rules", "delete"): "delete_rule",
    ("policies", "delete"): "delete_policy", ("subscriptions", "delete"): "delete_subscription",
    ("subscriptions", "test"): "test_subscription"}
"""The page's buttons: (list, verb) -> the API's write route it sends (write_api.py)."""
ROUTES = {r.name: r for r in GOVERNANCE_WRITES}


def acts(viewer: Viewer) -> Any:
    """What the viewer may do with a listed entity (`kind`, its list item): the verbs whose
    buttons the page shows. A schedule: whom `muster schedule list` shows it to without `read`
    on the tenant (its owner, or who may run its operation: may_see_schedule); rules and
    policies: `grant` on the tenant; subscriptions: `read` on it. Shown is not decided: the
    governance service checks again and says why it refuses (a schedule's resume by an owner
    who may no longer run its operation)."""
    def on_tenant(permission: Permission) -> bool:
        return viewer.may is None or bool(viewer.may(permission, Scope(tenant=viewer.tenant)))

    def verbs(kind: str, item: dict[str, Any]) -> list[str]:
        if kind == "schedule":
            entity = item.get("entity") or {}
            if viewer.may is not None and not may_see_schedule(viewer.name, viewer.may, viewer.tenant, entity):
                return []
            if item.get("ended"):
                return ["delete"]
            return ["resume" if entity.get("paused") else "pause", "delete"]
        if kind in ("rule", "policy"):
            return ["delete"] if on_tenant("grant") else []
        return ["test", "delete"] if on_tenant("read") else []
    return verbs


LOSES = {
    "schedules": "it will not run again",
    "rules": "the operations it holds for approval will run without one",
    "policies": "operations will no longer be judged by it",
    "subscriptions": "its destination will get no more notifications"}
"""What a Delete takes away, said when the page asks first."""


def confirming(request: web.Request) -> dict[str, str] | None:
    """The Delete the page asks about (`?confirm=<list>/<name>`, where a Delete without
    `confirm` went), or none. Asking is not deciding: the delete's own post is checked as
    any other (CSRF, same origin, the service's permission)."""
    what, _, name = request.query.get("confirm", "").partition("/")
    if (what, "delete") not in ACTIONS or not name:
        return None
    return {"what": what, "name": name, "kind": kind_of(what), "loses": LOSES[what]}


def kind_of(what: str) -> str:
    return what.removesuffix("s").replace("policie", "policy")


def said_of(request: web.Request, viewer: Viewer) -> str | None:
    """The answer of the page's last button, if the console sealed it for this viewer."""
    said = request.query.get("said")
    if said and csrf.sealed(session_token(request), viewer.tenant, SAID_KEY, said, request.query.get("seal")):
        return said
    return None


async def act(request: web.Request) -> web.StreamResponse:
    """POST /ui/governance/{what}/{name}/{verb}: one of the page's buttons, sent as the viewer
    through the API's own write route; back to the page, which says the answer."""
    try:
        viewer = await viewer_of(request)
    except NeedsSignIn as need:
        return signed_out(request, need)
    if not same_origin(request):
        return error(403, "a governance change must come from the console's own page")
    what, name, verb = (request.match_info[k] for k in ("what", "name", "verb"))
    route = ACTIONS.get((what, verb))
    if route is None:
        return error(404, f"the governance page has no button {verb[:20]!r} for {what[:20]!r}")
    form = await request.post()
    if not csrf.valid(session_token(request), viewer.tenant, str(form.get(csrf.FIELD) or "")):
        return error(403, "the form is out of date (its CSRF token does not match your session): reload the page")
    if verb == "delete" and str(form.get("confirm") or "") != name:  # the page asks first
        return redirect(f"/ui/governance?confirm={quote(what, safe='')}/{quote(name, safe='')}#confirm")
    written = await submit(tracker_of(request), request.app[ACTING],
                           Actor(viewer.tenant, viewer.name, session_token(request), viewer.may), ROUTES[route], {"name": name}, None)
    kind = kind_of(what)
    if written.ok:
        said = done(kind, name, verb, written.body)
    else:
        said = f"{verb} of {kind} {name!r} refused: {written.body['error']['message']}"
    seal = csrf.seal(session_token(request), viewer.tenant, SAID_KEY, said)
    return redirect(f"/ui/governance?said={quote(said)}&seal={seal}")


def done(kind: str, name: str, verb: str, answer: dict[str, Any]) -> str:
    """A button's answer in words, as the CLI says it."""
    if verb == "test":
        status = (answer.get("items") or [{}])[0].get("status")
        return f"test notification delivered to {name}" + (f" (HTTP {status})" if status else "")
    past = {"pause": "paused", "resume": "resumed", "delete": "deleted"}[verb]
    return f"{kind} {name} {past}"


def failing(item: dict[str, Any]) -> list[str]:
    """The checks of `policy apply` a stored policy fails (none: it is judged as written), each
    without the policy's name, which the page says beside it."""
    name, version = str(item["name"]), int(item["version"])
    return [f.removeprefix(f"policy {name!r} ") for f in stored.failed(name, version, str(item["entity"].get("source", "")))]



async def decide(request: web.Request) -> web.StreamResponse:
    """POST /ui/jobs/{job_id}/decide: `action` approve, reject or check, and a `comment`. The
    page's script asks for JSON (`said`, `accepted`) and stays, so a comment typed before Check
    first or a refusal is kept (job.js); a form posted without it goes back to the page."""
    wants_json = "application/json" in request.headers.get("Accept", "")
    checked = await job_form(request, "a decision")
    if isinstance(checked, web.Response):
        return checked
    viewer, job_id, form = checked
    action, comment = str(form.get("action") or ""), str(form.get("comment") or "")
    decided = False
    if action not in ("approve", "reject", "check"):
        said = f"refused: {action[:40]!r} is neither approve, reject nor check"
    elif len(comment) > MAX_COMMENT_CHARS:  # (cut short, it was recorded as if the approver had said less)
        said = f"refused: comment: {too_long_text(len(comment), MAX_COMMENT_CHARS)}"
    else:
        said, decided = await send(request.app[ACTING], session_token(request), viewer.tenant, viewer.name, job_id, action, comment)
    if wants_json:
        return web.json_response({"said": said, "accepted": decided, "action": action})
    return said_at(request, viewer, job_id, said)


async def send(bus: ActingBus, token: str | None, tenant: str, by: str, job_id: str, action: str,
               comment: str) -> tuple[str, bool]:
    """The decision, sent as the viewer; the planner's answer in words, and whether it decided."""
    try:
        nc = await bus.connection(token) if token else bus.own
    except TokenRefused as err:
        return f"refused: {err}", False
    client = MusterClient(nc, tenant=tenant, requested_by=by, timeout=DECIDE_TIMEOUT_S, attempts=2)
    command = RejectJob(job_id=job_id, comment=comment) if action == "reject" else \
        ApproveJob(job_id=job_id, comment=comment, dry_run=action == "check")
    try:
        reply = await client.request(command, tenant=tenant)
    except NoAnswer as err:
        return f"no answer: {err}", False
    if isinstance(reply, DryRun):
        return looked(reply), False
    if isinstance(reply, Accepted):  # with what the approval found changed since the request (decision 42)
        return ("approved" if action == "approve" else "rejected") + "".join(f"; {w}" for w in reply.warnings), True
    return f"refused: {getattr(reply, 'reason', reply.type)}", False


def looked(reply: DryRun) -> str:
    """An approval's dry run in words: what an approval now would find (decision 42)."""
    policy = reply.policy or {}
    verdict = ("an approval now would be refused: " + "; ".join(policy["deny"])) if policy.get("deny") else \
        "the tenant's policies allow it now"
    changed = any("at the catalog's prices now" in w for w in reply.warnings)  # says the cost then and now
    # (a price the viewer may not read is 0 in the figure: said to be `no price`, not read as free)
    # and what it does to each type's cost, before -> once done (`PlanCost` v2)
    cost = [f"it costs {rate(reply.cost['per_hour'])}/h once done at today's prices"
            + unpriced(reply.cost, reply.layout.model_dump(mode="json") if reply.layout else None),
            *type_changes(reply.cost)] if reply.cost and not changed else []
    warns = [f"policy warns: {w}" for w in policy.get("warn", [])]
    return "; ".join(["checked, nothing decided: " + verdict, *cost, *warns, *reply.warnings])


def add_routes(app: web.Application) -> None:
    app.router.add_get("/ui/governance", governance)
    app.router.add_post("/ui/governance/{what}/{name}/{verb}", act)
    app.router.add_post("/ui/jobs/{job_id}/decide", decide)
