"""The fold behind `muster logs` (muster/readmodel/output.py): an ended attempt shows its
outcome's stdout and stderr, a running one the lines its plugin reported, skips said."""

from __future__ import annotations

from datetime import UTC, datetime

from contracts.events import TaskClaimed, TaskFailed, TaskProgressed, TaskSucceeded
from contracts.records import Recorded
from muster.readmodel.output import attempt_outputs, render

T0 = datetime(2026, 12, 2, tzinfo=UTC)


def _log(*events: object) -> list[Recorded]:
    return [Recorded(seq=i, subject="s", time=T0, event=e) for i, e in enumerate(events, start=1)]


def test_an_ended_attempt_shows_its_outcome_and_a_running_one_its_lines() -> None:
    log = _log(
        TaskClaimed(job_id="j", task_id="n1.install.a", attempt=1, provisioner="p", worker="p/w0"),
        TaskProgressed(job_id="j", task_id="n1.install.a", attempt=1, provisioner="p", worker="p/w0", n=1, line="step one"),
        TaskFailed(job_id="j", task_id="n1.install.a", attempt=1, provisioner="p", worker="p/w0", error="exit 1",
                   stdout="step one\nstep two\n", stderr="boom"),
        TaskClaimed(job_id="j", task_id="n1.install.a", attempt=2, provisioner="p", worker="w1"),
        TaskProgressed(job_id="j", task_id="n1.install.a", attempt=2, provisioner="p", worker="w1", n=1, line="again"),
        TaskProgressed(job_id="j", task_id="n1.install.a", attempt=2, provisioner="p", worker="w1", n=5, line="later", skipped=3),
        TaskClaimed(job_id="j", task_id="n2.create", attempt=1, provisioner="p", worker="p/w2"),
        TaskSucceeded(job_id="j", task_id="n2.create", attempt=1, provisioner="p", worker="p/w2"),
    )
    outputs = attempt_outputs(log)
    assert [(o.task_id, o.attempt, o.state, o.runs_on) for o in outputs] == [
        ("n1.install.a", 1, "failed", "p/w0"), ("n1.install.a", 2, "running", "p/w1"), ("n2.create", 1, "succeeded", "p/w2")]
    assert render(outputs) == [
        "n1.install.a attempt 1: failed on p/w0: exit 1", "  stdout:", "    step one", "    step two", "  stderr:", "    boom",
        "n1.install.a attempt 2: running on p/w1", "  so far:", "    again", "    … 3 lines left out", "    later",
        "n2.create attempt 1: succeeded on p/w2", "  (no output)"]
    assert [o.attempt for o in attempt_outputs(log, "n1.install.a")] == [1, 2] and attempt_outputs(log, "n9.x") == []
