"""The console's forms as request bodies (services/tracker/ui/formdata.py): each problem named at
its field; a saved plan's request turned back into the fields that ask for it again; and which
job controls a job's state allows."""

from __future__ import annotations

from typing import Any

import pytest

from services.tracker.ui import formdata
from services.tracker.ui.controls import controls_for
from services.tracker.ui.formdata import OPS, create_body, field_of, fields_of, operation_body
from services.tracker.write_api import BY_NAME


def _form(pairs: list[tuple[str, str]]) -> dict[str, list[str]]:
    form: dict[str, list[str]] = {}
    for k, v in pairs:
        form.setdefault(k, []).append(v)
    return form


def test_a_create_form_becomes_the_body_the_api_takes() -> None:
    body, errors = create_body(_form([("name", "c1"), ("template", "t"), ("nodes", "3"), ("services", "base"), ("services", "zk"),
                                      ("hardwaretype", ""), ("config", '{"a": {"b": 1}}')]))
    assert errors == {} and body == {"name": "c1", "template": "t", "nodes": 3, "services": ["base", "zk"], "config": {"a": {"b": 1}}}


@pytest.mark.parametrize(("pairs", "field", "words"), [
    ([("name", ""), ("nodes", "3")], "name", "give the cluster a name"),
    ([("name", "c"), ("nodes", "")], "nodes", "say how many"),
    ([("name", "c"), ("nodes", "-1")], "nodes", "not a whole number"),
    ([("name", "c"), ("nodes", "2"), ("config", "{oops")], "config", "not valid JSON: Expecting property name"),
    ([("name", "c"), ("nodes", "2"), ("config", "[]")], "config", "must be a JSON object"),
    # What Python's parser takes but JSON has not, or what it gives up on with an exception of its
    # own: each said at the field (they were a 500 page, or a config stored as null for NaN).
    ([("name", "c"), ("nodes", "2"), ("config", '{"a": NaN}')], "config", "NaN is not a JSON number"),
    ([("name", "c"), ("nodes", "2"), ("config", '{"a": -Infinity}')], "config", "-Infinity is not a JSON number"),
    ([("name", "c"), ("nodes", "2"), ("config", '{"a": 1e999}')], "config", "1e999 is too large a number"),
    ([("name", "c"), ("nodes", "2"), ("config", '{"a": ' + "9" * 5000 + "}")], "config", "a number of 5,000 digits"),
    ([("name", "c"), ("nodes", "2"), ("config", "[" * 50_000)], "config", "nests 50,000 levels deep; the limit is 32"),
    ([("name", "c"), ("nodes", "2"), ("config", '{"a": ' * 33 + "1" + "}" * 33)], "config", "nests 33 levels deep"),
    # No service ticked: said at the services, not as the solver's "the template has no default services".
    ([("name", "c"), ("nodes", "2"), ("template", "t")], "services", "tick at least one service"),
])
def test_a_create_forms_problems_are_named_at_their_field(pairs: list[tuple[str, str]], field: str, words: str) -> None:
    _, errors = create_body(_form(pairs))
    assert words in errors[field]


@pytest.mark.parametrize(("op", "pairs", "expected", "errors"), [
    ("expand", [("nodes", "5")], {"nodes": 5}, {}),
    ("remove-services", [], {"services": []}, {"services": "pick the services to remove"}),
    ("restart", [("rolling", "25%"), ("tolerance", "1")], {"rolling": {"batch": "25%", "tolerance": 1}}, {}),
    ("restart", [("rolling", ""), ("tolerance", "2")], {}, {"tolerance": "a tolerance goes with a rolling batch"}),
    ("restart", [("rolling", "0%")], {}, {"rolling": "a rolling batch is at least one node (or a percentage above 0)"}),
    ("configure", [("config", '{"a": NaN}')], {}, {"config": "not valid JSON: NaN is not a JSON number (JSON has no NaN or Infinity), at a"}),
    ("configure", [("config", "{}"), ("restart", "on"), ("rolling", "2")], {"config": {}, "restart": True,
                                                                          "rolling": {"batch": 2, "tolerance": 0}}, {}),
    ("upgrade", [("service", "base")], {"service": "base"}, {}),
    ("repair", [("rolling", "1")], {"rolling": {"batch": 1, "tolerance": 0}}, {}),  # as `repair --rolling 1`
    ("delete", [("confirm", "c1")], None, {}),
    ("delete", [("confirm", "C1")], None, {"confirm": "'C1' does not match the cluster's name, c1: nothing is deleted"}),
    ("delete", [("confirm", "")], None, {"confirm": "type the cluster's name, c1, to confirm"}),
])
def test_cluster_operations_forms(op: str, pairs: list[tuple[str, str]], expected: Any, errors: dict[str, str]) -> None:
    body, found = operation_body(op, _form(pairs), "c1")
    assert found == errors
    if not errors:
        assert body == expected


def test_api_errors_land_at_the_forms_fields_and_a_saved_request_asks_again() -> None:
    fields = ("nodes", "services", "rolling", "tolerance")
    assert [field_of(p, fields) for p in ("services.2", "rolling.tolerance", "rolling.batch", "if_version", None)] == [
        "services", "tolerance", "rolling", "form", "form"]
    body = {"name": "c1", "template": "t", "nodes": 3, "services": ["base"], "config": {"x": 1}, "hardwaretype": "small"}
    again, errors = create_body(_form(fields_of("create", body)))
    assert errors == {} and again == body
    assert ("op", "configure") in fields_of("configure-restart", {"config": {}, "restart": True})


def test_a_jobs_state_decides_its_controls() -> None:
    assert controls_for("running", True) == ["pause", "cancel"]
    assert controls_for("paused", True) == ["resume", "cancel"]
    assert controls_for("failed", True) == ["retry"] and controls_for("failed", False) == []
    assert controls_for("succeeded", True) == controls_for("rolled_back", False) == []


def test_each_change_form_has_its_write_route_and_the_planners_permission() -> None:
    assert all(BY_NAME[op.route].verb == op.name for op in OPS.values())
    assert {op.name: op.permission for op in OPS.values() if op.permission != "write"} == {
        "start": "execute", "stop": "execute", "restart": "execute", "check": "execute"}


def test_durations_read_in_the_unit_that_fits() -> None:
    from services.tracker.ui import _seconds

    assert [_seconds(v) for v in (0.25, 3, 90, 600, 86400, 7 * 86400, None)] == ["250 ms", "3.0 s", "90.0 s", "10 min", "24 h",
                                                                                 "7 d", "–"]


def test_a_start_or_stop_names_its_services_and_nodes_and_a_repair_takes_nothing() -> None:
    """The console's start, stop, check and repair forms (a new user's walk, session 20)."""
    from services.tracker.ui.formdata import fields_of, operation_body

    body, errors = operation_body("stop", {"services": ["zookeeper-server"], "nodes": ["n1000, n1001  n1002"]}, "c1")
    assert errors == {} and body == {"services": ["zookeeper-server"], "nodes": ["n1000", "n1001", "n1002"]}
    assert operation_body("start", {"nodes": [" "]}, "c1") == ({}, {})  # every service, every node
    assert operation_body("restart", {"nodes": ["n1001"]}, "c1") == ({"nodes": ["n1001"]}, {})
    assert operation_body("check", {"services": ["hdfs-namenode"]}, "c1") == ({"services": ["hdfs-namenode"]}, {})
    assert operation_body("repair", {}, "c1") == ({}, {})
    assert ("nodes", "n1000, n1001") in fields_of("stop", {"nodes": ["n1000", "n1001"]})  # Change: the form as typed
    assert operation_body("rollback", {"to_job": ["5ae0e438-c796-575d-8e25-9e786000fb74"]}, "c1") == (
        {"to_job": "5ae0e438-c796-575d-8e25-9e786000fb74"}, {})
    assert operation_body("rollback", {}, "c1")[1] == {"to_job": "pick the job to go back before"}
    assert ("to_job", "5ae0") in fields_of("rollback", {"to_job": "5ae0"})


def test_the_change_forms_a_cluster_page_offers_and_where_their_errors_are_said() -> None:
    every = list(OPS)
    assert formdata.offered_ops(every, 2, (2, 50), ["base"], [], [{"id": "j"}]) == [
        op for op in every if op not in ("shrink", "add-services")]
    assert formdata.size_note(every, formdata.offered_ops(every, 2, (2, 50), ["base"], [], []), 2, (2, 50)) == \
        "It has 2 nodes, the fewest its template allows (2 to 50): no shrink."
    assert formdata.size_note(every, formdata.offered_ops(every, 3, (3, 3), ["base"], [], []), 3, (3, 3)) == \
        "It has 3 nodes, the only size its template allows (3 to 3): no expand or shrink."
    assert formdata.size_note(["delete"], ["delete"], 2, (2, 50)) is None  # (nothing the viewer may use is missing)
    shown = ["expand", "restart"]
    assert formdata.shown_errors("restart", shown, {"rolling": "bad", "form": "busy"}) == {"rolling": "bad", "form": "Restart: busy"}
    assert formdata.shown_errors("shrink", shown, {"nodes": "too few"}) == {"form": "Shrink: too few"}
    assert formdata.shown_errors("reboot", shown, {"op": "'reboot' is not an operation"}) == {"form": "'reboot' is not an operation"}
    assert formdata.shown_errors(None, shown, {}) == {}


def test_the_changes_a_viewer_may_not_make_are_said_by_the_permission_each_needs() -> None:
    """A user without execute found no Restart on the cluster page and no word why (session 34)."""
    withheld = [OPS[name] for name in ("start", "stop", "delete", "restart")]
    said = formdata.withheld_note(withheld, lambda permission: f"bob has no {permission} permission (ask)")
    assert said == ["Start services, Stop services and Restart need execute: bob has no execute permission (ask).",
                    "Delete needs write: bob has no write permission (ask)."]
    assert formdata.withheld_note([], lambda permission: "never asked") == []
