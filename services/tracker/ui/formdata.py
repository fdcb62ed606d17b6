"""The console's forms as request bodies, and back (pure; docs/ui.md, "Operating").

A form's fields are strings; each operation turns them into the body its write route takes
(`write_api`), or into errors keyed by the form's field, each saying what is wrong (a node count
that is not a number, config that is not JSON, a delete whose typed name does not match). The
inverse, `fields_of`, turns a saved plan's request back into the fields that ask for it again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contracts.commands import ID, MAX_CLUSTER_SIZE, too_many_nodes
from contracts.limits import NotJson, strict_json
from services.auth.domain.authz import OPERATION_PERMISSIONS

Form = Mapping[str, Sequence[str]]
"""A posted form: every value of each field, in order."""


@dataclass(frozen=True)
class Op:
    """One operation the console offers on a cluster."""

    name: str
    """The operation's verb, as the bus and the permission table name it."""
    title: str
    fields: tuple[str, ...] = ()
    """The fields its form has, each of which shows its own errors (_operations.html)."""

    @property
    def route(self) -> str:
        """Its write route's name (write_api.BY_NAME)."""
        return self.name.replace("-", "_") + "_cluster"

    @property
    def permission(self) -> str:
        """What the viewer needs on the cluster: the planner's own table's answer."""
        return OPERATION_PERMISSIONS[self.name]


_ROLLING = ("rolling", "tolerance")
OPS: dict[str, Op] = {op.name: op for op in (
    Op("expand", "Expand", ("nodes",)),
    Op("shrink", "Shrink", ("nodes",)),
    Op("add-services", "Add services", ("services",)),
    Op("remove-services", "Remove services", ("services",)),
    Op("start", "Start services", ("services", "nodes")),
    Op("stop", "Stop services", ("services", "nodes")),
    Op("restart", "Restart", ("services", "nodes", *_ROLLING)),
    Op("configure", "Configure", ("config", *_ROLLING)),
    Op("upgrade", "Upgrade a service", ("service", *_ROLLING)),
    Op("check", "Check services", ("services",)),
    Op("repair", "Repair", _ROLLING),
    Op("rollback", "Roll back", ("to_job",)),
    Op("delete", "Delete", ("confirm",)),
)}
OPERATION_OF_OP = {"expand": "expand", "shrink": "shrink", "add-services": "add-services", "remove-services": "remove-services",
                   "start": "start", "stop": "stop", "restart": "restart", "configure": "configure",
                   "configure-restart": "configure", "upgrade": "upgrade", "check": "check", "repair": "repair",
                   "rollback": "rollback", "delete": "delete"}
"""A saved plan's operation -> the form that asks for it."""
_BATCH = re.compile(r"^(\d+|\d+(\.\d+)?%)$")


NAME = re.compile(ID)  # CreateCluster.name's pattern, said in words before the request is made


def _one(form: Form, name: str) -> str:
    values = form.get(name) or ()
    return str(values[0]).strip() if values else ""


def _many(form: Form, name: str) -> list[str]:
    return [str(v).strip() for v in form.get(name) or () if str(v).strip()]


def _nodes(form: Form, errors: dict[str, str]) -> int | None:
    raw = _one(form, "nodes")
    if not raw:
        errors["nodes"] = "say how many nodes"
    elif not raw.isdigit():
        errors["nodes"] = f"{raw[:20]!r} is not a whole number of nodes"
    elif not raw.strip("0"):
        errors["nodes"] = "a cluster has at least one node"
    elif len(raw.lstrip("0")) > 6 or int(raw) > MAX_CLUSTER_SIZE:  # (the planner checks the template's bound)
        errors["nodes"] = too_many_nodes(f"{raw[:20]}{'…' if len(raw) > 20 else ''}" if len(raw) > 6 else f"{int(raw):,}")
    else:
        return int(raw)
    return None


def _node_ids(form: Form) -> list[str] | None:
    """The nodes a start, stop or restart acts on (`n1000, n1001`; empty: every node). The
    planner refuses an unknown one by name, at this field."""
    return [n for n in re.split(r"[\s,]+", _one(form, "nodes")) if n] or None


def config_of(raw: str, errors: dict[str, str]) -> dict[str, Any] | None:
    """A config field's JSON object, or None with the reason at `config`. Strict JSON: NaN and
    Infinity, which Python's parser takes, would reach the log as null (pydantic writes them so);
    the nesting is bounded before parsing, as the planner bounds a request's (the parser's
    RecursionError would be a 500 page)."""
    if not raw.strip():
        return {}
    try:
        value = strict_json(raw)
    except json.JSONDecodeError as err:
        errors["config"] = f"not valid JSON: {err.msg} (line {err.lineno}, column {err.colno})"
        return None
    except NotJson as err:
        errors["config"] = str(err) if err.deep else f"not valid JSON: {err}"
        return None
    if not isinstance(value, dict):
        errors["config"] = f"must be a JSON object ({{...}}), not {type(value).__name__}"
        return None
    return value


def _rolling(form: Form, errors: dict[str, str]) -> dict[str, Any] | None:
    batch, tolerance = _one(form, "rolling"), _one(form, "tolerance") or "0"
    if not tolerance.isdigit():
        errors["tolerance"] = f"{tolerance[:20]!r} is not a whole number of nodes"
        return None
    if not batch:
        if int(tolerance):
            errors["tolerance"] = "a tolerance goes with a rolling batch"
        return None
    if not _BATCH.fullmatch(batch):
        errors["rolling"] = f"{batch[:20]!r} is neither a number of nodes nor a percentage (e.g. 2, 25%)"
        return None
    if not float(batch.rstrip("%")):
        errors["rolling"] = "a rolling batch is at least one node (or a percentage above 0)"
        return None
    return {"batch": int(batch) if batch.isdigit() else batch, "tolerance": int(tolerance)}


_STAND_INS: dict[str, Any] = {"name": "stand-in", "nodes": 1, "config": {}}


def stand_ins(errors: Mapping[str, str]) -> dict[str, Any]:
    """A valid value for each create field the form found wrong, so the rest can be checked
    (what is said of a stand-in is dropped: the form's own word on its field stands)."""
    return {k: v for k, v in _STAND_INS.items() if k in errors}


def create_body(form: Form) -> tuple[dict[str, Any], dict[str, str]]:
    """`POST /v1/clusters`'s body from the create form, and the errors by field."""
    errors: dict[str, str] = {}
    body: dict[str, Any] = {"name": _one(form, "name"), "template": _one(form, "template"), "services": _many(form, "services")}
    if not body["name"]:
        errors["name"] = "give the cluster a name"
    elif not NAME.fullmatch(body["name"]):
        errors["name"] = f"{body['name'][:40]!r}: a cluster's name is letters, digits, '-' and '_' only (at most 128)"
    if not body["services"]:  # (the solver would say the template has no default services: it has, unticked)
        errors["services"] = "tick at least one service: a cluster runs at least one"
    nodes = _nodes(form, errors)
    if nodes is not None:
        body["nodes"] = nodes
    for name in ("provider", "hardwaretype", "imagetype"):
        if _one(form, name):
            body[name] = _one(form, name)
    config = config_of(_one(form, "config"), errors)
    if config is not None:
        body["config"] = config
    return body, errors


def operation_body(op: str, form: Form, cluster_name: str) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """The body of a cluster operation from its form (None: the route takes none), and the errors."""
    errors: dict[str, str] = {}
    body: dict[str, Any] = {}
    if op in ("expand", "shrink"):
        nodes = _nodes(form, errors)
        if nodes is not None:
            body["nodes"] = nodes
    elif op in ("add-services", "remove-services"):
        body["services"] = _many(form, "services")
        if not body["services"]:
            errors["services"] = f"pick the services to {op.split('-')[0]}"
    elif op in ("start", "stop"):
        body.update(services=_many(form, "services") or None, nodes=_node_ids(form))
    elif op == "restart":
        body["services"] = _many(form, "services") or None
        body["rolling"] = _rolling(form, errors)
        body["nodes"] = _node_ids(form)
    elif op == "check":
        body["services"] = _many(form, "services") or None
    elif op == "repair":  # what to repair is what the last check found (the cluster page's drift)
        body["rolling"] = _rolling(form, errors)
    elif op == "rollback":
        body["to_job"] = _one(form, "to_job")
        if not body["to_job"]:
            errors["to_job"] = "pick the job to go back before"
    elif op == "configure":
        config = config_of(_one(form, "config"), errors)
        body.update(config=config, restart=_one(form, "restart") in ("on", "true", "1"), rolling=_rolling(form, errors))
    elif op == "upgrade":
        body.update(service=_one(form, "service"), rolling=_rolling(form, errors))
        if not body["service"]:
            errors["service"] = "pick the service to upgrade"
    elif op == "delete":
        if (typed := _one(form, "confirm")) != cluster_name:  # forms.js says the same before sending
            errors["confirm"] = (f"'{typed}' does not match the cluster's name, {cluster_name}: nothing is deleted"
                                 if typed else f"type the cluster's name, {cluster_name}, to confirm")
        return None, errors
    else:
        errors["op"] = f"{op[:40]!r} is not an operation the console offers"
    return {k: v for k, v in body.items() if v is not None}, errors


def offered_ops(allowed: Sequence[str], nodes: int, bounds: tuple[int, int], on: Sequence[str], addable: Sequence[str],
            earlier: Sequence[Any]) -> list[str]:
    """The change forms a cluster page shows, of those the viewer may use: not one that cannot
    be filled in right (a shrink at the template's least size, an expand at its most, services
    to add when the template allows no other, a rollback with no earlier change to go back to)."""
    can = {"expand": nodes < bounds[1], "shrink": nodes > max(bounds[0], 1), "add-services": bool(addable),
           "rollback": bool(earlier), **{op: bool(on) for op in ("remove-services", "start", "stop", "restart", "upgrade", "check")}}
    return [op for op in allowed if can.get(op, True)]


def size_note(allowed: Sequence[str], shown: Sequence[str], nodes: int, bounds: tuple[int, int]) -> str | None:
    """Why an expand or a shrink the viewer may use is not offered: the cluster's size is at the
    template's bound (said, not only left out, so nobody looks for it)."""
    no = [op for op in ("expand", "shrink") if op in allowed and op not in shown]
    if not no:
        return None
    which = "the only size" if len(no) == 2 else "the most" if no == ["expand"] else "the fewest"
    return (f"It has {nodes} node{'s' if nodes != 1 else ''}, {which} its template allows ({bounds[0]} to {bounds[1]}): "
            f"no {' or '.join(no)}.")


def withheld_note(withheld: Sequence[Op], why: Callable[[str], str]) -> list[str]:
    """The changes the viewer may not use, by the permission each needs, with why (`why`: the
    viewer's refusal of that permission on the cluster, naming the grant to ask for). Said, not
    only left out: a user looking for Restart found no form and no word (session 34's walk)."""
    by: dict[str, list[str]] = {}
    for op in withheld:
        by.setdefault(op.permission, []).append(op.title)
    return [f"{_listed(titles)} need{'s' if len(titles) == 1 else ''} {permission}: {why(permission)}."
            for permission, titles in by.items()]


def _listed(words: Sequence[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def shown_errors(op: str | None, shown: Sequence[str], errors: Mapping[str, str]) -> dict[str, str]:
    """A change's errors as the page shows them: each under its field when the page has that
    form and field, else above the forms, named by the change (a post from a page that offered
    a form this one no longer does, e.g. services to add once every one is on; without this, a
    422 page that said nothing)."""
    chosen = OPS.get(op or "")
    fields = chosen.fields if chosen is not None and chosen.name in shown else ()
    out = {k: v for k, v in errors.items() if k in fields}
    unseen = [v for k, v in errors.items() if k not in fields]
    if unseen:
        out["form"] = (f"{chosen.title}: " if chosen is not None else "") + "; ".join(unseen)
    return out


def field_of(parameter: str | None, fields: Sequence[str]) -> str:
    """The form field an API error names (`rolling.tolerance` -> `tolerance`, `services.2` ->
    `services`), or "form" when it names none of the form's fields."""
    if not parameter:
        return "form"
    if parameter == "rolling.tolerance":
        return "tolerance" if "tolerance" in fields else "form"
    head = parameter.split(".")[0]
    return head if head in fields else "form"


def fields_of(operation: str, request: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A saved plan's request as the form fields that ask for it again."""
    out: list[tuple[str, str]] = []
    for name in ("name", "template", "nodes", "provider", "hardwaretype", "imagetype", "service", "to_job"):
        if request.get(name) not in (None, ""):
            value = request[name]  # `nodes`: a count (expand, shrink) or the nodes a start/stop acts on
            out.append((name, ", ".join(map(str, value)) if isinstance(value, list) else str(value)))
    out += [("services", s) for s in request.get("services") or ()]
    if "config" in request and (operation != "create" or request["config"]):
        out.append(("config", json.dumps(request["config"], indent=2)))
    if request.get("restart"):
        out.append(("restart", "on"))
    rolling = request.get("rolling")
    if isinstance(rolling, dict):
        out += [("rolling", str(rolling.get("batch", ""))), ("tolerance", str(rolling.get("tolerance", 0)))]
    if operation != "create":
        out.append(("op", OPERATION_OF_OP.get(operation, operation)))
    return out
