"""The governance page's forms as bodies and back (services/tracker/ui/govformdata.py, pure)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from services.tracker.ui import govformdata as data


def form(**fields: Any) -> dict[str, list[str]]:
    return {k: v if isinstance(v, list) else [v] for k, v in fields.items()}


def test_a_rule_form_is_its_body_and_its_edit_form_gives_the_same_body_back() -> None:
    body, errors = data.body_of("rules", form(operations=["create", "expand"], min_nodes="20", clusters="prod-*, web",
                                              labels="env=prod, team=data", expires="2h", allow_self_approval="1"))
    assert errors == {}
    assert body == {"description": "", "operations": ["create", "expand"], "clusters": ["prod-*", "web"], "allow_self_approval": True,
                    "labels": {"env": "prod", "team": "data"}, "expires_after_s": 7200.0, "min_nodes": 20}
    again, errors = data.body_of("rules", form(**data.values_of("rules", {"name": "big", **body})))
    assert errors == {} and again == body


@pytest.mark.parametrize(("fields", "field", "said"), [
    ({"expires": "soon"}, "expires", "'soon' is not a length of time"),
    ({"expires": "40d"}, "expires", "at most 30d"),
    ({"min_nodes": "0"}, "min_nodes", "is not a node count"),
    ({"labels": "prod"}, "labels", "write key=value"),
])
def test_a_rule_form_s_mistakes_are_said_at_their_fields(fields: dict[str, str], field: str, said: str) -> None:
    _, errors = data.body_of("rules", form(**fields))
    assert said in errors[field]


def test_a_subscription_s_secret_is_kept_on_an_edit_left_blank_and_never_given_back() -> None:
    stored = {"name": "ops", "events": ["job_failed"], "clusters": [], "lease_warning_s": 3600.0,
              "webhook": {"url": "https://hooks.example/m", "secret": "secret://ops-hook", "format": "slack"}}
    values = data.values_of("subscriptions", stored)
    assert values["secret"] == "" and "secret://ops-hook" not in repr(values)
    body, errors = data.body_of("subscriptions", form(**values), kept_secret="secret://ops-hook")
    assert errors == {} and body["webhook"] == stored["webhook"]
    _, errors = data.body_of("subscriptions", form(**values))  # a new one needs its reference
    assert "secret://NAME" in errors["secret"]
    _, errors = data.body_of("subscriptions", form(**{**values, "secret": "hunter2"}))  # a secret in clear: refused, unsaid
    assert "hunter2" not in errors["secret"]
    assert data.posted("subscriptions", form(**{**values, "secret": "hunter2"}))["secret"] == ""
    body, errors = data.body_of("subscriptions", form(events=["drift_found"], target="subject", subject="muster.cb.acme.x"))
    assert errors == {} and body["subject"] == "muster.cb.acme.x" and "webhook" not in body


def test_a_schedule_form_is_the_command_the_bus_takes_and_its_edit_keeps_the_rest_as_options() -> None:
    body, errors = data.body_of("schedules", form(cluster="c1", operation="expand", nodes="5", cron="0 6 * * 1",
                                                  timezone="Europe/Paris", missed="skip"))
    assert errors == {}
    assert body == {"verb": "expand", "command": {"type": "ExpandCluster", "cluster_id": "c1", "nodes": 5}, "cron": "0 6 * * 1",
                    "timezone": "Europe/Paris", "missed": "skip"}
    stored = {"name": "r", "verb": "restart", "every_s": 600.0, "timezone": "UTC", "missed": "once",
              "command": {"type": "RestartServices", "cluster_id": "c1", "services": ["hbase"], "rolling": {"batch": 1}}}
    values = data.values_of("schedules", stored)
    assert values["services"] == "hbase" and values["every"] == "10m" and values["options"] == '{"rolling": {"batch": 1}}'
    again, errors = data.body_of("schedules", form(**values))
    assert errors == {} and again["command"] == stored["command"] and again["every_s"] == 600.0


@pytest.mark.parametrize(("fields", "field", "said"), [
    ({"cron": "0 3 * * *", "every": "1h"}, "every", "not both"),
    ({}, "cron", "when does it run?"),
    ({"cron": "0 3 * * *", "options": "[1]"}, "options", "a JSON object"),
    ({"cron": "0 3 * * *", "options": "{nope"}, "options", "not JSON"),
    ({"cron": "0 3 * * *", "operation": "expand"}, "nodes", "new total"),
    ({"cron": "0 3 * * *", "cluster": ""}, "cluster", "pick the cluster"),
    ({"cron": "0 3 * * *", "operation": "explode"}, "operation", "not an operation"),
])
def test_a_schedule_form_s_mistakes_are_said_at_their_fields(fields: dict[str, str], field: str, said: str) -> None:
    _, errors = data.body_of("schedules", form(**{"cluster": "c1", "operation": "check", **fields}))
    assert said in errors[field], errors


@pytest.mark.parametrize(("what", "parameter", "message", "field"), [
    ("policies", None, "policy 'p' does not compile (line 5): Unable to unify", "source"),
    ("policies", None, "policy 'p' (line 3): `deny[msg]` makes deny an object", "source"),
    ("policies", None, "name 'Limits!' is not a name: use 1 to 64 letters", "name"),
    ("subscriptions", None, "subscription 'ops': webhook.secret: secret 'ops-hook' is not in the notifier's secrets file", "secret"),
    ("subscriptions", None, "subscription 'ops': webhook.url: 10.0.0.5 is a private address", "url"),
    ("subscriptions", "webhook.secret", "Value error, the webhook's secret must be a reference", "secret"),
    ("subscriptions", "events.0", "'job_faled' is not allowed", "events"),
    ("subscriptions", None, "subscription 'ops': its subject must be one of the tenant's, muster.cb.acme.…", "subject"),
    ("schedules", None, "schedule 's': cron '61 * * * *': Bad minute (5 fields, minute first)", "cron"),
    ("schedules", None, "schedule 's': unknown time zone 'Mars' (an IANA name such as UTC or Europe/Paris)", "timezone"),
    ("schedules", None, "schedule 's': cluster web was deleted (job j): its operation could never run", "cluster"),
    ("schedules", "command.nodes", "'9' is not a number", "nodes"),
    ("schedules", "every_s", "0.5 is less than 1", "every"),
    ("rules", None, "rule 'r': operations: 'crate' is not an operation a rule can match", "operations"),
    ("rules", "expires_after_s", "is over the limit", "expires"),
    ("rules", None, "rule 'r' is given twice", "name"),
    ("rules", None, "something else entirely", "form"),
])
def test_a_refusal_is_put_at_the_field_its_words_name(what: str, parameter: str | None, message: str, field: str) -> None:
    assert data.field_of(what, parameter, message) == field


def test_a_schedule_s_preview_is_its_next_ticks_in_its_zone_and_a_bad_timing_says_where() -> None:
    now = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
    runs, errors = data.next_runs({"cron": "30 2 * * *", "timezone": "Europe/Paris", "command": {}}, now)
    assert errors == {} and [r.isoformat() for r in runs[:2]] == ["2026-12-03T01:30:00+00:00", "2026-12-04T01:30:00+00:00"]
    runs, errors = data.next_runs({"every_s": 3600.0, "command": {}}, now)
    assert runs[0] == datetime(2026, 12, 2, 11, 0, tzinfo=UTC) and len(runs) == 5
    since = datetime(2026, 12, 2, 9, 40, tzinfo=UTC)  # an edit that keeps its interval: its ticks count from its creation
    assert data.next_runs({"every_s": 3600.0, "command": {}}, now, since)[0][0] == datetime(2026, 12, 2, 10, 40, tzinfo=UTC)
    assert "cron" in data.next_runs({"cron": "61 * * * *", "command": {}}, now)[1]
    assert "timezone" in data.next_runs({"cron": "0 3 * * *", "timezone": "Mars/Olympus", "command": {}}, now)[1]
