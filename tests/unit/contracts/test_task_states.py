"""TaskAttemptFailed v2 says whether the attempt timed out; a v1 event said so only in its error
text, and reads as v2 (old logs keep their timeouts). v3 says whether a failed create may have
made its machine."""

from __future__ import annotations

import json

from contracts.events import EVENT_ADAPTER, TaskAttemptFailed


def test_a_v1_timeout_reads_as_timed_out_and_other_v1_failures_as_failed() -> None:
    v1 = {"type": "TaskAttemptFailed", "v": 1, "job_id": "j", "task_id": "n1.create", "attempt": 2}
    timed = EVENT_ADAPTER.validate_json(json.dumps({**v1, "error": "timed out: no outcome within 600s"}))
    failed = EVENT_ADAPTER.validate_json(json.dumps({**v1, "error": "timed out connecting to 10.0.0.1"}))
    assert isinstance(timed, TaskAttemptFailed) and timed.state == "timed_out" and timed.v == 1
    assert isinstance(failed, TaskAttemptFailed) and failed.state == "failed"


def test_a_v2_event_carries_its_state() -> None:
    e = TaskAttemptFailed(job_id="j", task_id="t", attempt=1, error="no outcome", state="timed_out")
    body = json.loads(e.model_dump_json())
    assert body["v"] == 5 and body["state"] == "timed_out" and body["may_have_made"] is False and body["permanent"] is False
    assert EVENT_ADAPTER.validate_json(e.model_dump_json()) == e
    assert TaskAttemptFailed(job_id="j", task_id="t", attempt=1, error="exit 1").state == "failed"


def test_a_v3_event_says_whether_a_failed_create_may_have_made_its_machine() -> None:
    e = TaskAttemptFailed(job_id="j", task_id="n1.create", attempt=1, error="create node: cannot reach the cloud",
                          may_have_made=True)
    assert EVENT_ADAPTER.validate_json(e.model_dump_json()) == e
    v2 = {"type": "TaskAttemptFailed", "v": 2, "job_id": "j", "task_id": "n1.create", "attempt": 1, "error": "x", "state": "failed"}
    old = EVENT_ADAPTER.validate_json(json.dumps(v2))
    assert isinstance(old, TaskAttemptFailed) and old.may_have_made is False  # events before v3 made no claim


def test_a_v4_event_says_whether_no_retry_can_mend_it_and_older_ones_read_as_retriable() -> None:
    e = TaskAttemptFailed(job_id="j", task_id="n1.create", attempt=1, error="create: the cloud refused the credentials",
                          permanent=True)
    assert EVENT_ADAPTER.validate_json(e.model_dump_json()) == e
    v3 = {"type": "TaskAttemptFailed", "v": 3, "job_id": "j", "task_id": "n1.create", "attempt": 1, "error": "x",
          "state": "failed", "may_have_made": False}
    old = EVENT_ADAPTER.validate_json(json.dumps(v3))
    assert isinstance(old, TaskAttemptFailed) and old.permanent is False
    v2 = {"type": "TaskFailed", "v": 2, "job_id": "j", "task_id": "t", "attempt": 1, "provisioner": "p", "worker": "w",
          "error": "x", "may_have_made": False}
    failed = EVENT_ADAPTER.validate_json(json.dumps(v2))
    assert failed.type == "TaskFailed" and failed.permanent is False


def test_a_v5_event_says_its_attempt_was_cancelled_unclaimed() -> None:
    e = TaskAttemptFailed(job_id="j", task_id="n1.create", attempt=1, error="cancelled before any provisioner claimed it",
                          state="cancelled")
    assert EVENT_ADAPTER.validate_json(e.model_dump_json()) == e and e.v == 5
