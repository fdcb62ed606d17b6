"""What every console page shares: the viewer first, HTML whatever happens (an unknown id is a
404 page, an unreachable NATS a 503 page, a bug a 500 page), and the checks of its parameters."""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp_jinja2
import nats.errors
import structlog
from aiohttp import web

from contracts.identity import Permission
from muster.bus.eventstore import StoreError

from .. import api, csrf, priced
from ..app import Tracker
from ..auth import job_cluster
from .session import NeedsSignIn, Viewer, auth_of, session_token, viewer_of

log = structlog.get_logger("muster.tracker.ui")

TRACKER_KEY: web.AppKey[Tracker] | None = None  # set by setup_ui (the tracker app's key)
_UUID = re.compile(api.UUID_PATTERN)
Handler = Callable[[web.Request, Viewer], Awaitable[web.StreamResponse]]


def redirect(location: str) -> web.Response:
    """A 303 as a plain response (the tracker's guard turns raised HTTP exceptions into JSON)."""
    return web.Response(status=303, headers={"Location": location})


def said_at(request: web.Request, viewer: Viewer, job_id: str, said: str) -> web.Response:
    """Back to the job's page, saying what a form's request got, sealed (csrf.seal)."""
    seal = csrf.seal(session_token(request), viewer.tenant, job_id, said)
    return redirect(f"/ui/jobs/{job_id}?said={quote(said)}&seal={seal}")


def said_of(request: web.Request, viewer: Viewer, job_id: str) -> str | None:
    """The `said` of the page's URL if the console made it for this viewer and job; nothing else."""
    said = request.query.get("said")
    if said and csrf.sealed(session_token(request), viewer.tenant, job_id, said, request.query.get("seal")):
        return said
    return None


def console_path(raw: str | None) -> str:
    """Only a path of the console: never an open redirect."""
    return raw if raw and raw.startswith("/ui/") and not raw.startswith("//") else "/ui/clusters"


def signed_out(request: web.Request, need: NeedsSignIn) -> web.Response:
    """No valid token. A browser (it asks for HTML: a page, a form it posts) gets the console's
    sign-in page saying why, a revoked token as no longer valid; it got a JSON 401 for a form
    posted with a revoked token. An API client or the pages' own scripts (`Accept:
    application/json`) get the JSON 401. A page is redirected (back to it once signed in); a
    form's post is answered with the page, back to where the form was."""
    wants = request.headers.get("Accept", "text/html" if request.method == "GET" else "")
    if "text/html" not in wants:  # (`sign_in`: where the page's script sends the browser, saying why)
        return web.json_response({"error": {"status": 401, "message": need.reason, "parameter": None},
                                  "sign_in": f"/ui/sign-in?why={quote(need.told)}"}, status=401)
    if request.method == "GET":
        return redirect(f"/ui/sign-in?next={quote(request.path_qs)}&why={quote(need.told)}")
    referer = urlsplit(request.headers.get("Referer", ""))
    back = referer.path + (f"?{referer.query}" if referer.query else "") if referer.netloc in ("", request.host) else ""
    return render(request, "signin.html", None, 401, next=console_path(back), why=need.told)


class NotFound(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotAllowed(Exception):
    """A page of the viewer's own tenant that its grants do not open: 403, saying which grant would."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def tracker_of(request: web.Request) -> Tracker:
    assert TRACKER_KEY is not None
    return request.app[TRACKER_KEY]


async def priced_for(request: web.Request, viewer: Viewer, job_id: str, status: dict[str, Any]) -> dict[str, Any]:
    """A job's status with the prices `viewer` may not read taken out, as the API answers it (../priced.py)."""
    return await priced.status_shown(tracker_of(request).plans, viewer.tenant, job_id, status,
                                     lambda name: not viewer.may_catalog("read", "hardwaretypes", name))


def render(request: web.Request, template: str, viewer: Viewer | None, code: int = 200, **context: Any) -> web.Response:
    auth = auth_of(request)
    context.update(viewer=viewer, asks_for=auth.asks_for, path=request.path_qs,
                   csrf=csrf.token_for(session_token(request), viewer.tenant) if viewer is not None else "")
    response = aiohttp_jinja2.render_template(template, request, context, status=code)
    response.headers["Cache-Control"] = "no-store"
    return response


def page(handler: Handler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    @functools.wraps(handler)
    async def wrapped(request: web.Request) -> web.StreamResponse:
        viewer: Viewer | None = None
        try:
            viewer = await viewer_of(request)
            return await handler(request, viewer)
        except NeedsSignIn as need:
            return signed_out(request, need)
        except NotFound as missing:
            return render(request, "error.html", viewer, 404, title="Not found", message=missing.message)
        except NotAllowed as refused:
            return render(request, "error.html", viewer, 403, title="Not allowed", message=refused.message)
        except (nats.errors.Error, StoreError, TimeoutError) as err:
            log.warning("console: nats unavailable", path=request.path, error=str(err) or type(err).__name__)
            return render(request, "error.html", viewer, 503, title="NATS is unavailable",
                          message=f"The tracker cannot reach NATS right now ({type(err).__name__}). Try again in a moment.")
        except Exception:
            log.exception("console page failed", path=request.path)
            return render(request, "error.html", viewer, 500, title="Something went wrong",
                          message="The console hit a bug; the tracker's log has the details.")

    return wrapped


def is_uuid(value: str) -> bool:
    return bool(_UUID.fullmatch(value))


def uuid_param(request: web.Request, name: str, what: str) -> str:
    value = request.match_info[name]
    if not _UUID.fullmatch(value):
        raise NotFound(f"{value[:80]!r} is not a {what} id (a UUID).")
    return value.lower()


def seq_param(request: web.Request) -> int | None:
    raw = request.query.get("seq")
    if raw is None or raw == "":
        return None
    if not raw.isdigit() or len(raw) > 18:
        raise NotFound(f"seq {raw[:40]!r} is not a log sequence.")
    return int(raw)


def readable_cluster(request: web.Request, viewer: Viewer) -> str:
    """The page's cluster id, if the viewer may read it; else "no such cluster"."""
    cluster_id = uuid_param(request, "cluster_id", "cluster")
    if not viewer.may_cluster("read", cluster_id):
        raise NotFound(f"There is no cluster {cluster_id} in tenant {viewer.tenant}.")
    return cluster_id


async def may_job(request: web.Request, viewer: Viewer, permission: Permission, job_id: str) -> bool:
    """For the stream and job control, which have no history at hand: the job's cluster looked
    up (the index, else its first event) only when grants decide."""
    if viewer.may is None:
        return True
    return viewer.may_job(permission, job_id, await job_cluster(tracker_of(request), viewer.tenant, job_id))
