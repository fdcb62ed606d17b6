"""The console's governance (docs/governance.md): approve or reject a job that waits for
approval from its page (the plan is the page's task graph), and the tenant's schedules (with
their last and next runs), approval rules, policies, subscriptions and denied requests.

A decision is the same request `muster job approve|reject` sends, in the signed-in principal's
name; the planner checks its `approve` permission and says why when it refuses.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from aiohttp import web

from contracts.identity import Scope

from ..governance import decide as send_decision
from ..governance import denials, listing
from .pages import NotFound, page, redirect, render, tracker_of, uuid_param
from .session import NeedsSignIn, Viewer, same_origin, viewer_of


@page
async def governance(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    if viewer.may is not None and not viewer.may("read", Scope(tenant=viewer.tenant)):
        raise NotFound(f"{viewer.name} may not read tenant {viewer.tenant}'s governance.")
    store = tracker_of(request).store
    lists: dict[str, Any] = {kind: await listing(store, viewer.tenant, kind) for kind in ("schedule", "rule", "policy", "subscription")}
    return render(request, "governance.html", viewer, denied=await denials(store, viewer.tenant, 20), **lists)


async def decide(request: web.Request) -> web.StreamResponse:
    """POST /ui/jobs/{job_id}/decide: `action` approve or reject, and a `comment`."""
    try:
        viewer = await viewer_of(request)
    except NeedsSignIn as need:
        return web.json_response({"error": {"status": 401, "message": need.reason, "parameter": None}}, status=401)
    if not same_origin(request):
        return web.json_response({"error": {"status": 403, "message": "a decision must come from the console's own page",
                                            "parameter": None}}, status=403)
    try:
        job_id = uuid_param(request, "job_id", "job")
    except NotFound as missing:
        return web.json_response({"error": {"status": 404, "message": missing.message, "parameter": "job_id"}}, status=404)
    form = await request.post()
    action, comment = str(form.get("action") or ""), str(form.get("comment") or "")
    if action not in ("approve", "reject"):
        said = f"rejected: {action[:40]!r} is neither approve nor reject"
    else:
        ok, words = await send_decision(tracker_of(request).nc, viewer.tenant, viewer.name, job_id, action == "approve", comment)
        said = words if ok else f"refused: {words}"
    return redirect(f"/ui/jobs/{job_id}?said={quote(said)}")


def add_routes(app: web.Application) -> None:
    app.router.add_get("/ui/governance", governance)
    app.router.add_post("/ui/jobs/{job_id}/decide", decide)
