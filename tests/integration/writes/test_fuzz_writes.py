"""Schemathesis over the write routes of the tracker's own OpenAPI document, with a real token
against a real planner (conftest.py): whatever a client sends, no 5xx but the documented 503,
every answer as documented; and after them all, every event the tenant's log gained belongs to a
request that was answered 2xx (a preview's saved plan, an accepted job): nothing a refused
request carried reached the log."""

from __future__ import annotations

import os
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed (dev dependency)")

from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.specs.openapi.checks import positive_data_acceptance  # noqa: E402

from contracts import subjects  # noqa: E402
from services.tracker.contract import document  # noqa: E402

from .conftest import Served  # noqa: E402

pytestmark = [pytest.mark.nats, pytest.mark.timeout(300)]

schema = schemathesis.openapi.from_dict(document()).include(method=["POST", "PUT", "DELETE"])
schema.config.phases.coverage.unexpected_methods = set()  # other methods: the guard's 405, fuzzed with the reads
# The coverage phase (every boundary of every parameter: ~1,900 requests, ~40 s here) runs with the
# long tests; the default run fuzzes each route `max_examples` times.
schema.config.phases.coverage.enabled = os.environ.get("MUSTER_LONG_TESTS") == "1"
answered: list[tuple[int, dict[str, Any]]] = []
before: dict[str, dict[str, int]] = {}


@schema.parametrize()
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_no_write_fails_the_tracker_or_breaks_its_document(case: Any, served: Served) -> None:
    before.setdefault("log", served.log())
    # Refusing a well-formed request is this API's job (no such template, cluster or plan; a busy
    # cluster): schemathesis's check that every schema-valid request succeeds does not apply.
    response = case.call_and_validate(base_url=served.url, timeout=15, excluded_checks=[positive_data_acceptance],
                                      headers={"Authorization": f"Bearer {served.tokens['writer']}"})
    answered.append((response.status_code, response.json() if response.status_code < 300 else {}))


def test_only_what_was_accepted_reached_the_log(served: Served) -> None:
    assert before and answered, "the fuzz test above did not run"
    after = served.log()
    grew = {s for s, n in after.items() if before["log"].get(s) != n}
    allowed = set()
    for status, body in answered:
        if status == 200 and "plan_id" in body:
            allowed.add(subjects.plan_events("default", body["plan_id"]))
        if status == 202:
            allowed |= {s for s in grew if body["job_id"] in s or body["cluster_id"] in s}
    assert grew <= allowed, f"refused requests reached the log: {sorted(grew - allowed)[:10]}"
    print(f"\n[fuzz writes] {len(answered)} requests, statuses {sorted({s for s, _ in answered})}, log grew by {len(grew)} subjects")
