"""Operating from the console (docs/ui.md, "Operating"): create a cluster from a template, change
or delete one, each previewed first, and apply exactly the plan that was shown.

Server-rendered forms: every post is a dry run of the write route the API has (`writes.submit`,
as the viewer, on the viewer's own token), answered by the preview page (layout, stages, task
counts, eager against staged estimate) with one button that applies that saved plan; a refusal
re-renders the form with the reason at its field. Applying answers with the job's live page, or
says what changed since the preview. Posts carry the page's CSRF token and must come from the
console's own pages (csrf.py, session.same_origin). Forms a viewer may not use are left out.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from contracts import subjects
from contracts.commands import MAX_CLUSTER_SIZE, CreateCluster
from contracts.events import FINAL_JOB_STATES
from muster.catalog.templates import TemplateError, resolve_template
from muster.readmodel.clusters import ClusterInfo
from services.planner.domain.admission import Facts, every_refusal
from services.planner.domain.operations import OPERATIONS

from .. import csrf
from ..write_api import BY_NAME
from ..write_routes import ACTING
from ..writes import Actor, Written, saved_plan, submit
from . import formdata, reads
from .kit import NotFound, page, readable_cluster, redirect, render, tracker_of
from .session import Viewer, same_origin, session_token

CREATE_FIELDS = ("name", "template", "nodes", "services", "provider", "hardwaretype", "imagetype", "config")


def add_routes(r: web.UrlDispatcher) -> None:
    """Before `/ui/clusters/{cluster_id}`, which would take `new` for an id."""
    r.add_get("/ui/clusters/new", new_cluster)
    r.add_post("/ui/clusters/new", post_new_cluster)
    r.add_post("/ui/clusters/{cluster_id}/preview", post_operation)
    r.add_post("/ui/plans/{plan_id}/apply", post_apply)


def actor(request: web.Request, viewer: Viewer) -> Actor:
    return Actor(viewer.tenant, viewer.name, session_token(request), viewer.may)


def may_create(viewer: Viewer) -> bool:
    return viewer.may_cluster("write", "*")


class Refused(Exception):
    """A post the console does not take (another site, a stale form, no permission): a page that says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


async def _form(request: web.Request, viewer: Viewer) -> dict[str, list[str]]:
    if not same_origin(request):
        raise Refused(403, "Forms must come from the console's own pages.")
    posted = await request.post()
    if not csrf.valid(session_token(request), viewer.tenant, str(posted.get(csrf.FIELD) or "")):
        raise Refused(403, "The form is out of date (its CSRF token does not match your session): reload the page and try again.")
    form: dict[str, list[str]] = {}
    for key, value in posted.items():
        form.setdefault(key, []).append(str(value))
    return form


def _refused(request: web.Request, viewer: Viewer, err: Refused) -> web.Response:
    return render(request, "error.html", viewer, err.status, title="Not done", message=err.message)


# -- create ------------------------------------------------------------------------------------------


async def _create_page(request: web.Request, viewer: Viewer, template: str | None, form: formdata.Form | None = None,
                       errors: dict[str, str] | None = None, status: int = 200) -> web.Response:
    data = await reads.catalog(tracker_of(request), viewer.tenant)
    catalog = data["catalog"]
    # The templates the viewer may read: those a create may name (the planner refuses the
    # others), as /ui/catalog and `muster catalog get` list them.
    names = [n for n in sorted(catalog.clustertemplates) if viewer.may_catalog("read", "clustertemplates", n)]
    hidden = len(catalog.clustertemplates) - len(names)
    chosen = template if template in names else (names[0] if names else None)
    spec, errors = None, dict(errors or {})
    if template and template not in names and "template" not in errors:  # (the planner's refusal says it best)
        # A mistyped or stale link: say so, not another template's form unasked.
        errors["template"] = (f"there is no template {template[:80]!r} you may read in tenant {viewer.tenant}"
                              + (f"; this is {chosen}'s form" if chosen else ""))
        status = max(status, 404)
    if chosen is not None:
        try:
            t = resolve_template(catalog, chosen)
        except TemplateError as err:
            errors["template"] = str(err)
        else:
            size = t.constraints.size
            def offered(kind: str, named: list[str], every: list[str]) -> list[str]:
                """What the template names is part of the template, which the viewer reads; a
                template that names none allows the whole catalog: what the viewer may read of it."""
                return list(named) or [n for n in every if viewer.may_catalog("read", kind, n)]

            default_provider = [t.defaults.provider] if t.defaults.provider else []
            spec = {"min": size.min, "max": size.max or MAX_CLUSTER_SIZE,
                    "services": offered("services", t.compatibility.services, sorted(catalog.services)),
                    "providers": sorted({*default_provider, *offered("providers", [], sorted(catalog.providers))}),
                    "provider": t.defaults.provider or "",
                    "hardwaretypes": offered("hardwaretypes", t.compatibility.hardwaretypes, sorted(catalog.hardwaretypes)),
                    "imagetypes": offered("imagetypes", t.compatibility.imagetypes, sorted(catalog.imagetypes)),
                    "hardwaretype": t.defaults.hardwaretype or "", "imagetype": t.defaults.imagetype or "",
                    "defaults": {"services": t.defaults.services, "config": json.dumps(t.defaults.config, indent=2),
                                 "nodes": str(max(size.min, min(3, size.max or 3)))}}
    values = _values(form, spec) if spec is not None else {}
    return render(request, "create.html", viewer, status, templates=names, hidden=hidden, chosen=chosen, spec=spec,
                  values=values, errors=errors)


def _values(form: formdata.Form | None, spec: dict[str, Any]) -> dict[str, Any]:
    """What the form shows: what was posted, else the template's defaults."""
    if form is None:
        return {"name": "", "nodes": spec["defaults"]["nodes"], "services": list(spec["defaults"]["services"]),
                "provider": "", "hardwaretype": "", "imagetype": "", "config": spec["defaults"]["config"]}
    one = {k: (form.get(k) or [""])[0] for k in ("name", "nodes", "provider", "hardwaretype", "imagetype", "config")}
    return {**one, "services": list(form.get("services") or ())}


@page
async def new_cluster(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    if not may_create(viewer):
        return _forbidden(request, viewer)
    return await _create_page(request, viewer, request.query.get("template"))


def _forbidden(request: web.Request, viewer: Viewer) -> web.Response:
    return render(request, "error.html", viewer, 403, title="Not allowed",
                  message=f"{viewer.name} may not create clusters in tenant {viewer.tenant}: that needs write on every cluster "
                          f"(a tenant admin can give it: muster grant {viewer.name} write --scope 'cluster:*'), "
                          "and read on the template a cluster is made from.")


@page
async def post_new_cluster(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    try:
        form = await _form(request, viewer)
    except Refused as err:
        return _refused(request, viewer, err)
    if not may_create(viewer):
        return _forbidden(request, viewer)
    template = (form.get("template") or [""])[0]
    if (form.get("step") or [""])[0] != "preview":  # another template chosen, or back from a preview: the form again
        return await _create_page(request, viewer, template, form)
    body, errors = formdata.create_body(form)
    if errors:  # the rest checked too, here: a form with several mistakes is told of each at once
        found = await _rule_errors(request, viewer, {**body, **formdata.stand_ins(errors)})
        return await _create_page(request, viewer, template, form, {**found, **errors}, 422)
    written = await submit(tracker_of(request), request.app[ACTING], actor(request, viewer), BY_NAME["create_cluster"], {}, body,
                           dry_run=True)
    if not written.ok:
        return await _create_page(request, viewer, template, form, _errors(written, CREATE_FIELDS), written.status)
    title = f"create cluster {body['name']} ({body['template']}, {body['nodes']} nodes)"
    return render(request, "preview.html", viewer, preview=written.body, title=title, apply="Create",
                  again=("/ui/clusters/new", formdata.fields_of("create", body)), cluster_id=None)


async def _rule_errors(request: web.Request, viewer: Viewer, body: dict[str, Any]) -> dict[str, str]:
    """What the planner's create rules (pure) would say of the fields the form found no fault
    in, the others given stand-ins (`formdata.stand_ins`): asked here, not as a dry run, so a
    form the console refuses writes nothing (a dry run the planner admits saves a plan). The
    planner decides when the form is right."""
    try:
        command = CreateCluster.model_validate({**body, "requested_by": viewer.name})
    except ValidationError:
        return {}  # (said by the form's own checks, or by the planner once they pass)
    catalog = (await reads.catalog(tracker_of(request), viewer.tenant))["catalog"]
    facts = Facts(viewer.tenant, "create", command, catalog, "", principal=viewer.name,
                  may_read=lambda entity: bool(viewer.may_catalog("read", *entity.split("/", 1))))
    errors: dict[str, list[str]] = {}
    for refused in every_refusal(OPERATIONS["create"].rules, facts):
        errors.setdefault(formdata.field_of(refused.field, CREATE_FIELDS), []).append(str(refused))
    return {field: "; ".join(said) for field, said in errors.items()}


def _errors(written: Written, fields: tuple[str, ...]) -> dict[str, str]:
    """Each problem at its field (a create refused for several has each at its own)."""
    errors: dict[str, list[str]] = {}
    for parameter, message in written.problems:
        errors.setdefault(formdata.field_of(parameter, fields), []).append(message)
    return {field: "; ".join(said) for field, said in errors.items()}


# -- an existing cluster ----------------------------------------------------------------------------


async def operations(request: web.Request, viewer: Viewer, cluster_id: str, form: formdata.Form | None = None,
                     errors: dict[str, str] | None = None, op: str | None = None) -> dict[str, Any] | None:
    """What the cluster page offers to change the cluster now: the operations the viewer may
    use, each with what its form needs, and which it may not with the grant each needs; None for
    a deleted cluster."""
    allowed = [o for o in formdata.OPS.values() if viewer.may_cluster(o.permission, cluster_id)]  # type: ignore[arg-type]
    withheld = formdata.withheld_note([o for o in formdata.OPS.values() if o not in allowed],
                                      lambda permission: viewer.why_not_cluster(permission, cluster_id))  # type: ignore[arg-type]
    tracker = tracker_of(request)
    info = ClusterInfo.from_history(await tracker.store.read(subjects.cluster_events(viewer.tenant, cluster_id)))
    if info is None or info.status == "deleted":
        return None
    catalog = (await reads.catalog(tracker, viewer.tenant))["catalog"]
    try:
        template = resolve_template(catalog, info.template)
        permitted = template.compatibility.services or sorted(catalog.services)
        size = template.constraints.size
        bounds = (size.min, size.max or MAX_CLUSTER_SIZE)
    except TemplateError:
        permitted, bounds = sorted(catalog.services), (1, MAX_CLUSTER_SIZE)
    on = sorted(info.services)
    posted = {k: (form.get(k) or [""])[0] for k in ("nodes", "config", "rolling", "tolerance", "service", "confirm", "restart",
                                                    "to_job")} if form else {}
    # What a rollback may go back before: the cluster's succeeded changes, newest first (its create is where it began).
    jobs = tracker.list_jobs(viewer.tenant, cluster_id, None, 0, 10_000).items if tracker.index is not None else []
    earlier = [j for j in reversed(jobs) if j["state"] == "succeeded" and j["operation"] not in ("create", "check")]
    # A job that waits (for an approver, for hosts) leaves the cluster `active` and busy all the same.
    waiting = next((j for j in jobs if j["id"] == info.job_id and j["state"] not in FINAL_JOB_STATES), None)
    addable = [s for s in permitted if s not in on]
    shown = formdata.offered_ops([o.name for o in allowed], len(info.nodes), bounds, on, addable, earlier)
    return {"ops": [o.name for o in allowed], "shown": shown, "size_note": formdata.size_note([o.name for o in allowed], shown, len(info.nodes), bounds), "titles": {o.name: o.title for o in allowed}, "name": info.name, "withheld": withheld,
            "status": info.status, "nodes": len(info.nodes), "bounds": bounds, "on": on,
            "addable": addable, "node_ids": [n.id for n in info.nodes], "earlier": earlier, "config": posted.get("config") or json.dumps(info.config, indent=2),
            "posted": posted, "checked": list(form.get("services") or ()) if form else [],
            "errors": formdata.shown_errors(op, shown, errors or {}), "open": op if op in shown else None,
            "busy": info.job_id if info.status not in ("active", "incomplete") else None, "waiting": waiting}


@page
async def post_operation(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    cluster_id = readable_cluster(request, viewer)
    try:
        form = await _form(request, viewer)
    except Refused as err:
        return _refused(request, viewer, err)
    op = (form.get("op") or [""])[0]
    chosen = formdata.OPS.get(op)
    info = ClusterInfo.from_history(await tracker_of(request).store.read(subjects.cluster_events(viewer.tenant, cluster_id)))
    if info is None:
        raise NotFound(f"There is no cluster {cluster_id} in tenant {viewer.tenant}.")
    if chosen is not None and not viewer.may_cluster(chosen.permission, cluster_id):  # type: ignore[arg-type]
        # Before the form's own checks: a change the viewer may not make is refused for that, as
        # the planner refuses it (it was told of a mistyped rolling batch of a restart it may not run).
        return render(request, "error.html", viewer, 403, title="Not allowed",
                      message=f"{op} refused: {viewer.why_not_cluster(chosen.permission, cluster_id)}")  # type: ignore[arg-type]
    editing = (form.get("step") or [""])[0] == "edit"  # back from a preview: the form again, as it was typed
    body, errors = formdata.operation_body(op, form, info.name) if not editing else (None, {})
    written: Written | None = None
    if chosen is not None and not errors and not editing:
        written = await submit(tracker_of(request), request.app[ACTING], actor(request, viewer), BY_NAME[chosen.route],
                               {"cluster_id": cluster_id}, body, dry_run=True)
        if written.ok:
            title = f"{chosen.title.lower()} cluster {info.name}"
            return render(request, "preview.html", viewer, preview=written.body, title=title,
                          apply="Delete" if op == "delete" else "Apply",
                          again=(f"/ui/clusters/{cluster_id}/preview#operations", [*formdata.fields_of(op, body or {}), ("op", op)][-200:]),
                          cluster_id=cluster_id, cluster_name=info.name)
        errors = _errors(written, ("nodes", "services", "config", "rolling", "tolerance", "service", "confirm", "restart",
                                   "to_job"))
    status = written.status if written is not None else 200 if editing else 422
    if status == 403:
        return render(request, "error.html", viewer, 403, title="Not allowed", message=written.message if written else "")
    data = await reads.cluster_page(tracker_of(request), viewer.tenant, cluster_id, None, viewer.operator)  # (as its page)
    if data is None:
        raise NotFound(f"There is no cluster {cluster_id} in tenant {viewer.tenant}.")
    ops = await operations(request, viewer, cluster_id, form, errors, op)
    return render(request, "cluster.html", viewer, status, cluster_id=cluster_id, operations=ops, **data)


# -- applying a saved plan ----------------------------------------------------------------------------


@page
async def post_apply(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    plan_id = request.match_info["plan_id"]
    try:
        await _form(request, viewer)  # the checks: same origin, CSRF
    except Refused as err:
        return _refused(request, viewer, err)
    written = await submit(tracker_of(request), request.app[ACTING], actor(request, viewer), BY_NAME["apply_plan"],
                           {"plan_id": plan_id}, None)
    if written.ok:
        return redirect(f"/ui/jobs/{written.body['job_id']}")
    found = await saved_plan(tracker_of(request), viewer.tenant, plan_id) if subjects.TOKEN.fullmatch(plan_id) else None
    again = None
    if found is not None and written.status != 403:  # (one who may not apply it may not make it again either)
        saved = found[0]
        target = "/ui/clusters/new" if saved.operation == "create" else f"/ui/clusters/{saved.cluster_id}/preview#operations"
        again = (target, formdata.fields_of(saved.operation, saved.command))
    return render(request, "refused.html", viewer, written.status, message=written.message, plan_id=plan_id, again=again)
