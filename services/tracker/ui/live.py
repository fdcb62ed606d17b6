"""The job page's live parts: its progress stream, and job control.

The stream is the API's own progress stream (`/v1/jobs/{id}/stream`: one `progress` event per
event of the job, then `end`), served under /ui with the tenant taken from the viewer's session,
because a browser's EventSource cannot send the `X-Muster-Tenant` header. The page rendered the
job as of log sequence N and asks for what came after (`?after=N`; on a reconnect the browser
sends `Last-Event-ID`), so nothing is missed or shown twice.

Job control sends the same request `muster job pause|resume|cancel|retry` sends, on
`muster.ops.<tenant>.<principal>.<verb>` as the viewer (on a connection opened with the viewer's
own token: acting.py), and shows the planner's answer as it is: "accepted" or
"rejected: <reason>". Both answer only for jobs the viewer may read (else "no job", as for an
unknown id), and control only for jobs it may execute (a grant on the job or its cluster). Posts
carry the page's CSRF token (csrf.py). Which buttons a job's state allows: `CONTROLS`.
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web

from contracts.commands import Accepted, Rejected
from muster.client import MusterClient, NoAnswer

from .. import csrf
from ..acting import ActingBus, TokenRefused
from ..params import not_found
from ..sse import job_stream
from ..still import Still
from ..write_routes import ACTING
from .batches import batched
from .bigpage import FOLDS
from .kit import NotFound, may_job, said_at, signed_out, tracker_of, uuid_param
from .session import NeedsSignIn, Viewer, same_origin, session_token, viewer_of

CONTROL_TIMEOUT_S = 5.0
VERBS = {"pause": "pause_job", "resume": "resume_job", "cancel": "cancel_job", "retry": "retry_job"}
def error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"status": status, "message": message, "parameter": None}}, status=status)


async def reader(request: web.Request, what: str) -> tuple[Viewer, str] | web.Response:
    """A stream's viewer and the id of its `what` (job, cluster) in the path; or the JSON answer
    to a script (401 signed out, 404 not an id)."""
    try:
        viewer = await viewer_of(request)
    except NeedsSignIn as need:
        return error(401, need.reason)
    ident = request.match_info[f"{what}_id"]
    if not re.fullmatch(r"[0-9a-fA-F-]{36}", ident):
        return error(404, f"{ident[:80]!r} is not a {what} id")
    return viewer, ident.lower()


def after_of(request: web.Request) -> int:
    """Where a stream goes on from: the page's `after`, or the browser's `Last-Event-ID` on a reconnect."""
    after = 0
    for raw in (request.query.get("after"), request.headers.get("Last-Event-ID")):
        if raw and re.fullmatch(r"[0-9]{1,18}", raw):
            after = max(after, int(raw))
    return after


async def stream(request: web.Request) -> web.StreamResponse:
    read = await reader(request, "job")
    if isinstance(read, web.Response):
        return read
    viewer, job_id = read
    if not await may_job(request, viewer, "read", job_id):
        return not_found("job", job_id, viewer.tenant)  # the answer for an unknown job (sse.job_stream)
    after = after_of(request)
    if request.query.get("batch"):  # the job page's: coalesced (batches.py)
        tracker = tracker_of(request)
        if not await tracker.job_exists(viewer.tenant, job_id):
            return not_found("job", job_id, viewer.tenant)
        return await batched(request, tracker, request.app[FOLDS], viewer.tenant, job_id, after, viewer.operator,
                             still_reading(request, job_id))
    return await job_stream(request, viewer.tenant, job_id, after, operator=viewer.operator,
                            still=still_reading(request, job_id))


def still_reading(request: web.Request, job_id: str) -> Still:
    """The viewer signed in again, as each page does, before each event sent (still.py): a
    session whose token was revoked, or whose grant on the job was taken back, ends its stream."""
    async def check() -> str | None:
        try:
            viewer = await viewer_of(request)
        except NeedsSignIn as need:
            return need.reason
        return None if await may_job(request, viewer, "read", job_id) else f"{viewer.name} may no longer read job {job_id}"

    return check


async def job_form(request: web.Request, what: str) -> tuple[Viewer, str, Any] | web.Response:
    """A form posted about a job from the console's own page: the viewer, the job id and the
    form, or the answer that refuses it (not signed in, another site, no such id, a stale form)."""
    try:
        viewer = await viewer_of(request)
    except NeedsSignIn as need:
        return signed_out(request, need)  # the sign-in page for a browser's form, JSON for the page's script
    if not same_origin(request):
        return error(403, f"{what} must come from the console's own page")
    try:
        job_id = uuid_param(request, "job_id", "job")
    except NotFound as missing:
        return error(404, missing.message)
    form = await request.post()
    if not csrf.valid(session_token(request), viewer.tenant, str(form.get(csrf.FIELD) or "")):
        return error(403, "the form is out of date (its CSRF token does not match your session): reload the page")
    return viewer, job_id, form


async def control(request: web.Request) -> web.StreamResponse:
    wants_json = "application/json" in request.headers.get("Accept", "")
    checked = await job_form(request, "job control")
    if isinstance(checked, web.Response):
        return checked
    viewer, job_id, form = checked
    action = str(form.get("action") or "")
    if action not in VERBS:
        said, ok = f"rejected: {action[:40]!r} is not one of {', '.join(VERBS)}", False
    elif not await tracker_of(request).job_exists(viewer.tenant, job_id) or not await may_job(request, viewer, "read", job_id):
        said, ok = f"rejected: there is no job {job_id} in tenant {viewer.tenant}", False
    elif not await may_job(request, viewer, "execute", job_id):
        said, ok = f"rejected: {viewer.name} may not {action} job {job_id}", False
    else:
        said, ok = await send(request.app[ACTING], session_token(request), viewer.tenant, viewer.name, action, job_id)
    if wants_json:
        return web.json_response({"said": said, "accepted": ok, "action": action})
    return said_at(request, viewer, job_id, said)


async def send(bus: ActingBus, token: str | None, tenant: str, by: str, action: str, job_id: str) -> tuple[str, bool]:
    """Send one job-control request as the viewer; the planner's answer in words, and whether it
    accepted."""
    try:
        nc = await bus.connection(token) if token else bus.own
    except TokenRefused as err:
        return f"rejected: {err}", False
    client = MusterClient(nc, tenant=tenant, requested_by=by, timeout=CONTROL_TIMEOUT_S, attempts=2)
    try:
        reply = await getattr(client, VERBS[action])(job_id, tenant=tenant)
    except NoAnswer as err:
        return f"no answer: {err}", False
    if isinstance(reply, Accepted):
        return "accepted", True
    if isinstance(reply, Rejected):
        return f"rejected: {reply.reason}", False
    return f"unexpected answer: {type(reply).__name__}", False
