"""The web console: pages for operators under /ui/ on the tracker (docs/ui.md).

Server-rendered (aiohttp-jinja2) from the tracker's own read side, with small scripts for what
must move: the job page's task graph (laid out by the vendored elkjs, in a web worker) and its
live updates from the progress stream, the cluster page's time slider, local times. Assets are
files of this package (static/); nothing is fetched from elsewhere.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp_jinja2
import jinja2
from aiohttp import web
from markupsafe import Markup, escape

from contracts.layout import Layout
from muster.durations import spoken
from muster.readmodel.cost import approval_cost, hardware_rates, rate, type_changes, waiting_cost
from muster.times import NO_LEASE_END
from services.pool.domain.views import resources_line

from ..app import Tracker
from . import cluster_live, forms, governance, govforms, kit, live, pages
from .bigpage import FOLDS
from .folds import JobFolds
from .session import CONSOLE_AUTH, ConsoleAuth

HERE = Path(__file__).parent
STATIC = HERE / "static"


def _short(ident: Any, n: int = 8) -> str:
    return str(ident)[:n] if ident else ""


def _seconds(value: Any) -> str:
    try:
        s = float(value)
    except (TypeError, ValueError):
        return "–"
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 120:
        return f"{s:.1f} s"
    # a rule's expiry of a day reads 24 h, not 1440.0 min
    unit, size = ("min", 60) if s < 7200 else ("h", 3600) if s < 172800 else ("d", 86400)
    return f"{s / size:.1f}".removesuffix(".0") + f" {unit}"


_CODE_SPAN = re.compile(r"`([^`\n]+)`")


def _code_spans(text: Any) -> Markup:
    """A message the bus or the API also says (a refusal, "there are no pools yet (`muster pool
    add-hosts NAME FILE` makes one)"), its backticks as <code>: they are the CLI's and the JSON's
    way of marking a command, and a page showed them literally. Escaped first, so only the spans
    are markup."""
    return Markup(_CODE_SPAN.sub(lambda m: f"<code>{m.group(1)}</code>", str(escape(text))))


def _duration(start: str | None, end: str | None) -> str:
    if not start or not end:
        return ""
    return _seconds((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds())


def _cost_rates(cost: dict[str, Any], layout: dict[str, Any] | None) -> list[str]:
    return hardware_rates(cost, Layout.model_validate(layout) if layout else None)


def setup_ui(app: web.Application, tracker_key: web.AppKey[Tracker], auth: ConsoleAuth | None = None) -> None:
    """Register the console's routes on the tracker app."""
    kit.TRACKER_KEY = tracker_key
    env = aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(HERE / "templates"),
                               autoescape=jinja2.select_autoescape(default=True), undefined=jinja2.StrictUndefined)
    env.filters.update(short=_short, seconds=_seconds, rate=rate, spoken=spoken, code_spans=_code_spans)
    env.globals.update(no_lease_end=NO_LEASE_END, duration=_duration, cost_rates=_cost_rates, resources_line=resources_line, waiting_cost=waiting_cost,
                       type_changes=type_changes, approval_cost=approval_cost)
    if auth is not None:
        app[CONSOLE_AUTH] = auth
    app[FOLDS] = JobFolds()
    r = app.router
    r.add_get("/", pages.root)  # the address `muster up` prints, opened in a browser (it was a JSON 404)
    r.add_get("/ui", pages.home)
    r.add_get("/ui/", pages.home)
    r.add_get("/ui/clusters", pages.clusters)
    forms.add_routes(r)  # before /ui/clusters/{cluster_id}
    r.add_get("/ui/clusters/{cluster_id}", pages.cluster)
    r.add_get("/ui/clusters/{cluster_id}/at", pages.cluster_at)
    r.add_get("/ui/clusters/{cluster_id}/stream", cluster_live.stream)
    r.add_get("/ui/jobs", pages.jobs)
    r.add_get("/ui/jobs/{job_id}", pages.job)
    r.add_get("/ui/jobs/{job_id}/graph", pages.job_graph)
    r.add_get("/ui/jobs/{job_id}/stream", live.stream)
    r.add_post("/ui/jobs/{job_id}/control", live.control)
    r.add_get("/ui/jobs/{job_id}/tasks/{task_id}", pages.task)
    r.add_get("/ui/catalog", pages.catalog)
    r.add_get("/ui/provisioners", pages.provisioners)
    r.add_get("/ui/pools", pages.pools)
    r.add_get("/ui/pools/{pool}", pages.pool)
    r.add_get("/ui/sign-in", pages.sign_in_form)
    r.add_post("/ui/sign-in", pages.sign_in)
    r.add_post("/ui/sign-out", pages.sign_out)
    govforms.add_routes(r)
    governance.add_routes(app)
    app.on_response_prepare.append(_page_headers)
    static = r.add_static("/ui/static", STATIC, name="ui-static")
    env.globals["static"] = lambda path: static_url(static, path)
    r.add_get("/ui/{tail:.*}", pages.unknown)


CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
       "worker-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
"""The console's pages run scripts of the tracker only (none inline: data goes in JSON blocks and
data- attributes), so text that got into a page unescaped could not run; no page may be framed
by another site (its buttons under someone else's)."""


async def _page_headers(request: web.Request, response: web.StreamResponse) -> None:
    if response.content_type == "text/html" and (request.path == "/" or request.path.startswith("/ui")):
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "same-origin")


def static_url(static: web.AbstractResource, path: str) -> str:
    """The asset's URL with its content hash, so a browser never keeps a stale copy."""
    assert isinstance(static, web.StaticResource)  # what add_static returns (typed as its base)
    return str(static.url_for(filename=path, append_version=True))
