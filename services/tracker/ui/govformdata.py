"""The governance page's forms as request bodies, and back (pure; docs/ui.md, `/ui/governance`).

A form's fields are strings; `body_of` turns them into the body `PUT /v1/governance/{what}/{name}`
takes (write_api.GOVERNANCE_WRITES), or into errors keyed by the form's field, in words (a
duration that is not one, options that are not a JSON object, a cron and an interval both
given). The governance service checks the rest (a policy's compile and checks, a cron's parse,
the notifier's view of a webhook) and its problems are put back at their fields by `field_of`.
`values_of` is the inverse: a stored entity as the form that edits it, never with a webhook's
signing secret (a blank secret on an edit keeps the stored one). `next_runs` is a schedule's
preview: the times it would run if saved now, from the scheduler's own tick function.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from contracts.commands import VERB_OF
from contracts.governance import MAX_APPROVAL_S, MAX_EVERY_S, MAX_LEASE_WARNING_S, NOTIFICATION_KINDS, Schedule
from contracts.limits import strict_json
from contracts.secrets import REFERENCE
from muster.durations import EXAMPLES, parsed
from services.governance.domain.schedules import ScheduleError, check, next_tick

Form = Mapping[str, Sequence[str]]
KIND_OF = {"rules": "rule", "policies": "policy", "subscriptions": "subscription", "schedules": "schedule"}
TITLE = {"rules": "approval rule", "policies": "policy", "subscriptions": "subscription", "schedules": "schedule"}
FIELDS: dict[str, tuple[str, ...]] = {
    "rules": ("name", "description", "operations", "min_nodes", "clusters", "labels", "expires", "allow_self_approval"),
    "policies": ("name", "description", "source"),
    "subscriptions": ("name", "events", "target", "url", "secret", "format", "subject", "clusters", "lease_warning"),
    "schedules": ("name", "cluster", "operation", "services", "nodes", "by", "options", "cron", "every", "timezone", "missed"),
}
"""Each form's fields, each of which shows its own error (governance_form.html)."""
SCHEDULED: dict[str, tuple[str, ...]] = {
    "check": ("services",), "repair": (), "restart": ("services",), "start": ("services",), "stop": ("services",),
    "expand": ("nodes",), "shrink": ("nodes",), "extend-lease": ("by",)}
"""The operations the schedule form offers on a cluster, with the fields of each (anything else
of a command goes in `options`, a JSON object)."""
KINDS = NOTIFICATION_KINDS
"""What a subscription may be told of, ticked on its form."""
TYPE_OF = {verb: kind for kind, verb in VERB_OF.items()}
_OWN = {"type", "v", "cluster_id", "requested_by", "request_id", "dry_run", "if_version"}
"""A command's fields the form never shows as options: its type and cluster are fields of their
own, the rest is not a schedule's to set."""
_SPLIT = re.compile(r"[,\s]+")
_UNITS = (("d", 86400), ("h", 3600), ("m", 60))


def one(form: Form, name: str) -> str:
    values = form.get(name) or ()
    return str(values[0]).strip() if values else ""


def _many(form: Form, name: str) -> list[str]:
    return [str(v).strip() for v in form.get(name) or () if str(v).strip()]


def _words(text: str) -> list[str]:
    return [w for w in _SPLIT.split(text) if w]


def typed(seconds: float) -> str:
    """A duration as the form takes it back (`7d`, `90s`)."""
    for unit, size in _UNITS:
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def _duration(form: Form, name: str, default: float | None, most: float, errors: dict[str, str], least: float = 0.0) -> float | None:
    text = one(form, name)
    if not text:
        return default
    value = parsed(text)
    if value is None:
        errors[name] = f"{text[:40]!r} is not a length of time ({EXAMPLES})"
    elif value <= 0 or value < least or value > most:
        errors[name] = f"{text[:40]} is not {'at least ' + typed(least) if least else 'more than 0'} and at most {typed(most)}"
    return value


def body_of(what: str, form: Form, kept_secret: str | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """(the PUT's body, errors by field). `kept_secret`: the stored subscription's signing secret,
    kept when an edit leaves the field blank."""
    errors: dict[str, str] = {}
    body: dict[str, Any]
    if what == "rules":
        body = {"description": one(form, "description"), "operations": _many(form, "operations"),
                "clusters": _words(one(form, "clusters")), "allow_self_approval": bool(one(form, "allow_self_approval")),
                "labels": _labels(one(form, "labels"), errors),
                "expires_after_s": _duration(form, "expires", 86400.0, MAX_APPROVAL_S, errors)}
        least = one(form, "min_nodes")
        if least:
            if least.isdigit() and int(least) >= 1:
                body["min_nodes"] = int(least)
            else:
                errors["min_nodes"] = f"{least[:20]!r} is not a node count (1 or more; empty: any size)"
    elif what == "policies":
        body = {"description": one(form, "description"), "source": str((form.get("source") or [""])[0]).replace("\r\n", "\n")}
        if not body["source"].strip():
            errors["source"] = "is empty: paste the policy's Rego"
    elif what == "subscriptions":
        body = {"events": _many(form, "events"), "clusters": _words(one(form, "clusters")),
                "lease_warning_s": _duration(form, "lease_warning", 3600.0, MAX_LEASE_WARNING_S, errors)}
        if not body["events"]:
            errors["events"] = "tick one or more kinds of notification"
        if one(form, "target") == "subject":
            body["subject"] = one(form, "subject")
            if not body["subject"]:
                errors["subject"] = "give the subject it publishes on (muster.cb.<tenant>.…)"
        else:
            secret = one(form, "secret") or kept_secret or ""
            if not REFERENCE.fullmatch(secret):  # (what was typed is never shown back: it may be a secret in clear)
                errors["secret"] = ("give a reference, secret://NAME, to a secret in the notifier's secrets file (docs/secrets.md); "
                                    "the log keeps a subscription in clear, so a secret itself is refused, and not shown back")
            body["webhook"] = {"url": one(form, "url"), "secret": secret, "format": one(form, "format") or "muster"}
            if not body["webhook"]["url"]:
                errors["url"] = "give the URL it posts to (https://…), or secret://NAME for a URL in the notifier's secrets file"
    elif what == "schedules":
        body = _schedule_body(form, errors)
    else:
        raise KeyError(what)
    return {k: v for k, v in body.items() if v is not None}, errors


def _labels(text: str, errors: dict[str, str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for word in _words(text):
        key, eq, value = word.partition("=")
        if not eq or not key:
            errors["labels"] = f"{word[:40]!r} is not a label: write key=value (env=prod), several separated by commas"
            continue
        labels[key] = value
    return labels


def _schedule_body(form: Form, errors: dict[str, str]) -> dict[str, Any]:
    verb, cluster = one(form, "operation"), one(form, "cluster")
    command: dict[str, Any] = {}
    raw = one(form, "options")
    if raw:
        try:
            options = strict_json(raw)
        except ValueError as err:  # (json's syntax errors, and NotJson)
            errors["options"] = f"not JSON: {err}"
        else:
            if isinstance(options, dict):
                command.update(options)
            else:
                errors["options"] = "give a JSON object of the command's other fields ({\"rolling\": {\"batch\": 1}}), or nothing"
    if verb not in TYPE_OF:
        errors["operation"] = f"{verb[:40]!r} is not an operation muster runs: pick one of {', '.join(SCHEDULED)}"
    else:
        command["type"] = TYPE_OF[verb]
    if cluster:
        command["cluster_id"] = cluster
    elif verb in SCHEDULED:
        errors["cluster"] = "pick the cluster it runs on"
    fields = SCHEDULED.get(verb, ())
    if "services" in fields and one(form, "services"):
        command["services"] = _words(one(form, "services"))
    if "nodes" in fields:
        nodes = one(form, "nodes")
        if nodes.isdigit() and int(nodes) >= 1:
            command["nodes"] = int(nodes)
        else:
            errors["nodes"] = f"{nodes[:20]!r} is not a node count: give the cluster's new total" if nodes else \
                f"give the cluster's new total of nodes (a {verb} needs one)"
    if "by" in fields:
        by = _duration(form, "by", None, 10 * 365 * 86400.0, errors)
        if by is not None:
            command["by_s"] = by
    cron, every = one(form, "cron"), one(form, "every")
    if cron and every:
        errors["every"] = "a schedule has a cron or an interval, not both: empty one of them"
    elif not cron and not every:
        errors["cron"] = "when does it run? give a cron ('0 3 * * *') or an interval (10m)"
    return {"verb": verb or None, "command": command, "cron": cron or None, "timezone": one(form, "timezone") or "UTC",
            "every_s": _duration(form, "every", None, MAX_EVERY_S, errors, least=1.0), "missed": one(form, "missed") or "once"}


def values_of(what: str, entity: Mapping[str, Any]) -> dict[str, Any]:
    """A stored entity as its edit form's values (strings and lists). A webhook's signing secret
    is left out: the page never shows it, and a blank one keeps it."""
    e = dict(entity)
    if what == "rules":
        return {"name": e["name"], "description": e.get("description", ""), "operations": list(e.get("operations") or []),
                "min_nodes": str(e.get("min_nodes") or ""), "clusters": ", ".join(e.get("clusters") or []),
                "labels": ", ".join(f"{k}={v}" for k, v in (e.get("labels") or {}).items()),
                "expires": typed(float(e.get("expires_after_s") or 86400.0)), "allow_self_approval": bool(e.get("allow_self_approval"))}
    if what == "policies":
        return {"name": e["name"], "description": e.get("description", ""), "source": e.get("source", "")}
    if what == "subscriptions":
        hook = e.get("webhook") or {}
        return {"name": e["name"], "events": list(e.get("events") or []), "target": "subject" if e.get("subject") else "webhook",
                "url": hook.get("url", ""), "secret": "", "format": hook.get("format", "muster"), "subject": e.get("subject") or "",
                "clusters": ", ".join(e.get("clusters") or []), "lease_warning": typed(float(e.get("lease_warning_s") or 3600.0))}
    command = dict(e.get("command") or {})
    verb = str(e.get("verb") or "")
    fields = SCHEDULED.get(verb, ())
    shown = {"services": ", ".join(command["services"]) if "services" in fields and command.get("services") else "",
             "nodes": str(command["nodes"]) if "nodes" in fields and "nodes" in command else "",
             "by": typed(float(command["by_s"])) if "by" in fields and command.get("by_s") else ""}
    rest = {k: v for k, v in command.items() if k not in _OWN and not (k in fields or (k == "by_s" and "by" in fields))}
    return {"name": e["name"], "cluster": str(command.get("cluster_id") or ""), "operation": verb, **shown,
            "options": json.dumps(rest) if rest else "", "cron": e.get("cron") or "",
            "every": typed(float(e["every_s"])) if e.get("every_s") else "", "timezone": e.get("timezone") or "UTC",
            "missed": e.get("missed") or "once"}


def posted(what: str, form: Form) -> dict[str, Any]:
    """What a refused form shows again: what was typed, but never the signing secret."""
    many = {"operations", "events"}
    values: dict[str, Any] = {f: (_many(form, f) if f in many else (form.get(f) or [""])[0]) for f in FIELDS[what]}
    if what == "rules":
        values["allow_self_approval"] = bool(one(form, "allow_self_approval"))
    if what == "subscriptions":
        values["secret"] = ""
    return values


_LABEL = re.compile(r"^(?:rule|policy|subscription|schedule) '[^']*': ")
_PATH = re.compile(r"^([a-z_][a-z0-9_]*(?:\.[A-Za-z0-9_\-]+)*): ")
_FORM_FIELD = {"webhook.url": "url", "webhook.secret": "secret", "webhook.format": "format", "expires_after_s": "expires",
               "lease_warning_s": "lease_warning", "every_s": "every", "command": "options", "verb": "operation",
               "command.cluster_id": "cluster", "command.nodes": "nodes", "command.services": "services", "command.by_s": "by"}


def field_of(what: str, parameter: str | None, message: str) -> str:
    """The form's field a refusal belongs at: the parameter the API named, else the one its words
    name (`subscription 'ops': webhook.secret: ...`, `policy 'p' does not compile (line 5)`,
    `schedule 's': cron '...'`); `form` (said above the form) when none."""
    fields = FIELDS[what]
    rest = _LABEL.sub("", message)
    path = parameter if parameter and parameter not in ("body", "name") else (m.group(1) if (m := _PATH.match(rest)) else "")
    if parameter == "name" or rest.startswith("name ") or rest.endswith("is given twice"):
        return "name"
    for key in (path, ".".join(path.split(".")[:2]), path.split(".")[0]):
        if key in _FORM_FIELD and _FORM_FIELD[key] in fields:
            return _FORM_FIELD[key]
        if key in fields:
            return key
    if what == "policies" and message.startswith("policy "):
        return "source"  # (a compile error or a check: each names its line)
    if what == "schedules":
        if rest.startswith(("cron ", "a schedule has exactly one")):
            return "cron"
        if rest.startswith("unknown time zone"):
            return "timezone"
        if "cluster" in rest:
            return "cluster"
        if rest.startswith("its command"):
            return "options"
    if what == "subscriptions" and rest.startswith("its subject"):
        return "subject"
    return "form"


def next_runs(body: Mapping[str, Any], now: datetime, since: datetime | None = None, count: int = 5) -> tuple[list[datetime], dict[str, str]]:
    """The next `count` ticks of a schedule saved now (`since`: when its ticks count from, its
    creation for an edit that keeps its timing), or why there are none (errors by field), from
    the scheduler's own `next_tick`."""
    try:
        schedule = Schedule.model_validate({**body, "name": "preview", "verb": body.get("verb") or "check"})
        check(schedule)
    except ScheduleError as err:
        return [], {field_of("schedules", None, str(err)): str(err)}
    except ValidationError as err:
        problem = err.errors()[0]
        where = ".".join(str(p) for p in problem["loc"]) or "cron"
        return [], {_FORM_FIELD.get(where, where if where in FIELDS["schedules"] else "cron"): str(problem["msg"]).removeprefix("Value error, ")}
    runs, at = [], now
    for _ in range(count):
        at = next_tick(schedule, at, since or now)
        runs.append(at)
    return runs, {}

