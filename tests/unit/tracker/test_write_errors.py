"""How a write's refusal reads over HTTP (services/tracker/writes.py): the field at fault by the
name the client used, never by pydantic's or the bus's inner names."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from services.tracker.write_api import BY_NAME, GOVERNANCE_WRITES, ROUTES
from services.tracker.writes import body_fields, command_types_refusal, in_http_terms, refused, request_id_for, validation_refusal

BY_NAME_ALL = {r.name: r for r in (*ROUTES, *GOVERNANCE_WRITES)}


@pytest.mark.parametrize(("route", "body", "field", "words"), [
    ("restart_cluster", {"rolling": {"batch": 0}}, "rolling.batch", "0 is under the limit: at least 1"),
    ("restart_cluster", {"rolling": {"batch": "half"}}, "rolling.batch", "'half' is not allowed here: give a whole number or a percentage such as '25%'"),
    ("restart_cluster", {"rolling": {"batch": 1, "tolerance": -1}}, "rolling.tolerance", "-1 is under the limit: at least 0"),
    # as `--rolling 2` reads; it said "Input should be a valid dictionary or instance of Rolling"
    ("repair_cluster", {"rolling": 2}, "rolling", '2 is not an object: give one, e.g. {"batch": 2, "tolerance": 0}'),
    ("create_cluster", {"name": "c", "template": "t", "nodes": 3, "config": [1]}, "config", "config: [1] is an array: give an object"),
    # pydantic said "String should have at most 2000 characters", "Input should be less than or equal to 10000"
    ("approve_job", {"comment": "x" * 2345}, "comment", "comment: 2,345 characters given; at most 2,000"),
    ("create_cluster", {"name": "c", "template": "t", "nodes": 20_000}, "nodes",
     "nodes: a cluster has at most 10,000 nodes (muster's limit, whatever the template says); 20,000 requested"),
])
def test_a_body_at_fault_names_its_field(route: str, body: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ValidationError) as raised:
        BY_NAME[route].body.model_validate(body)  # type: ignore[union-attr]
    written = validation_refusal(raised.value)
    assert (written.status, written.field) == (422, field) and words in written.message
    assert "constrained-" not in written.message


def test_the_planners_refusals_name_the_headers_the_client_sent() -> None:
    request_id = request_id_for("default", "alice", "grow-c1")
    reused = refused(409, f"request_id {request_id!r} was used already, for job J (expand of cluster C), with a different "
                          "request (it differs in nodes): send that same request again to get that job, or use a new request_id",
                     "request_id", job_id="J")
    written = in_http_terms(reused, request_id, "grow-c1")
    assert written.field == "Idempotency-Key" and written.body["error"]["job_id"] == "J"
    assert written.message.startswith("Idempotency-Key 'grow-c1' was used already") and "request_id" not in written.message
    unmatched = refused(409, f"request_id {request_id!r} was used already, for job J (expand of cluster C), with a different "
                             "request (it differs in if_version, nodes): send that same request again to get that job, or use "
                             "a new request_id", "request_id", job_id="J")
    assert "(it differs in If-Match, nodes)" in in_http_terms(unmatched, request_id, "grow-c1").message
    moved = in_http_terms(refused(412, "cluster 'C' is at version 9, not 7 (if_version): it changed since you looked",
                                  "if_version"), None, None)
    assert moved.field == "If-Match" and "(If-Match)" in moved.message
    named = in_http_terms(refused(412, "cluster 'C' is at version 9, not 7 (if_version): it changed since you looked",
                                  "if_version"), None, None, {"C": "web"})
    assert named.message.startswith("cluster web (C) is at version 9, not 7 (If-Match)"), named.message
    assert in_http_terms(refused(422, "bad", "nodes"), None, None).field == "nodes"


def test_a_field_the_body_does_not_have_is_answered_with_those_it_has() -> None:
    """`{"add": "2h"}` to extend-lease (the CLI's option is `--add`) was told "Extra inputs are
    not permitted" (a new user's walk, session 20)."""
    body = BY_NAME["extend_lease"].body
    assert body is not None
    with pytest.raises(ValidationError) as raised:
        body.model_validate({"add": "2h"})
    written = validation_refusal(raised.value, takes=body.model_fields)
    assert (written.status, written.field) == (422, "add")
    assert written.message == "invalid request: add: this body has no field 'add' (its fields: by_s, until)"


def _typed_fields() -> list[tuple[str, str, str]]:
    """Every write body's top-level field that takes a number or true/false, by route."""
    found = []
    for route in (*ROUTES, *GOVERNANCE_WRITES):
        if route.body is None:
            continue
        for name, prop in route.body.model_json_schema()["properties"].items():
            kinds = {p.get("type") for p in prop.get("anyOf", [prop])} - {"null", None}
            if kinds and kinds <= {"integer", "number", "boolean"}:
                found.append((route.name, name, "boolean" if "boolean" in kinds else "number"))
    return found


TYPED = _typed_fields()


@pytest.mark.parametrize(("route", "field", "kind"), TYPED, ids=[f"{r}.{f}" for r, f, _ in TYPED])
def test_a_json_body_is_strict_a_string_for_a_number_or_a_bool_is_refused_naming_the_field(route: str, field: str,
                                                                                           kind: str) -> None:
    """`{"nodes": "3"}` made a 3-node cluster over HTTP (pydantic's lax mode read the string);
    a body is typed by its sender, so the quotes are its mistake, named."""
    given = "true" if kind == "boolean" else "3"
    model = BY_NAME_ALL[route].body
    assert model is not None
    with pytest.raises(ValidationError) as raised:
        body_fields(model, {field: given})
    written = validation_refusal(raised.value)
    said = dict(written.problems)
    assert f"'{given}' is text: give " in said[field] and said[field].endswith(", without quotes"), written.message


def test_a_strict_body_still_takes_what_json_says_as_strings_and_whole_numbers_for_numbers() -> None:
    """Strict is strict about JSON's types, not about what JSON can only say as a string (an
    enum's value, a date, a percentage), and a whole number is a number."""
    assert body_fields(BY_NAME["restart_cluster"].body, {"rolling": {"batch": "25%"}, "services": ["base"]})  # type: ignore[arg-type]
    assert body_fields(BY_NAME["create_cluster"].body, {"name": "c", "template": "t", "nodes": 3,  # type: ignore[arg-type]
                                                        "lease_s": 3600})["lease_s"] == 3600
    assert body_fields(BY_NAME["extend_lease"].body, {"until": "2030-01-01T00:00:00Z"})  # type: ignore[arg-type]
    with pytest.raises(ValidationError) as raised:
        body_fields(BY_NAME["create_cluster"].body, {"name": "c", "template": "t", "nodes": 3.5})  # type: ignore[arg-type]
    assert validation_refusal(raised.value).message == "invalid request: nodes: 3.5 is not a whole number"
    with pytest.raises(ValidationError) as raised:
        body_fields(BY_NAME["create_cluster"].body, {"name": "c", "template": "t", "nodes": 3,  # type: ignore[arg-type]
                                                     "services": "base"})
    assert validation_refusal(raised.value).message == "invalid request: services: 'base' is text: give an array, e.g. [\"base\"]"


def test_a_schedules_command_is_held_to_jsons_types_as_the_body_is() -> None:
    """A schedule's `command` is a free object in the body's schema: `"nodes": "9"` in it was
    stored, and each tick read it as 9."""
    cid = "0b0c5a59-6b1e-4d43-9d55-3f4a14b0b001"
    for fields in ({"command": {"type": "ExpandCluster", "cluster_id": cid, "nodes": "9"}},
                   {"verb": "expand", "command": {"cluster_id": cid, "nodes": "9"}}):  # typed by its verb
        written = command_types_refusal(fields)
        assert written is not None and (written.status, written.field) == (422, "command.nodes"), fields
        assert written.message == "invalid request: command.nodes: '9' is text: give a whole number, without quotes"
    assert command_types_refusal({"command": {"type": "ExpandCluster", "cluster_id": cid, "nodes": 9}}) is None
    # Wrong in other ways too (no cluster): the governance service's words say what a command must be.
    assert command_types_refusal({"command": {"type": "ExpandCluster", "nodes": "9"}}) is None
    assert command_types_refusal({"command": {"cluster_id": cid}}) is None


def test_strict_about_jsons_types_only_a_date_for_a_time_is_still_read() -> None:
    """Strict mode also refuses a date for a time (`"until": "2030-01-01"`), which lax mode reads
    well and JSON can only say as a string: only values of another JSON type are refused."""
    body = BY_NAME["extend_lease"].body
    assert body is not None
    assert body_fields(body, {"until": "2030-01-01"})["until"].year == 2030
    with pytest.raises(ValidationError) as raised:
        body_fields(body, {"until": "tomorrow"})
    assert validation_refusal(raised.value).message == ("invalid request: until: 'tomorrow' is not a time: give one in ISO 8601 "
                                                        "with its time zone, e.g. '2030-01-01T09:00:00Z'")
    with pytest.raises(ValidationError) as raised:  # a union (a count or a percentage): the count's words
        body_fields(BY_NAME["restart_cluster"].body, {"rolling": {"batch": "2"}})  # type: ignore[arg-type]
    assert validation_refusal(raised.value).message == "invalid request: rolling.batch: '2' is text: give a whole number, without quotes"
