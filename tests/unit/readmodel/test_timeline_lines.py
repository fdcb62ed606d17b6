"""One line per event in `muster history`: what an attempt that never ran says."""

from __future__ import annotations

from contracts.events import TaskAttemptFailed
from muster.readmodel.timeline import describe
from services.planner.domain.job import STRANDED


def test_an_attempt_its_segment_stranded_says_so_not_that_a_cancel_ended_it() -> None:
    """A create that failed on its first attempt (`fail_first_attempts_create`, no one cancelled)
    showed each of its node's queued followers as `cancelled: no provisioner claimed it before
    the cancel`: the event's own reason was there, and the history said another."""
    stranded = TaskAttemptFailed(job_id="j", task_id="n1000.confirm", attempt=1, state="cancelled", error=STRANDED)
    assert describe(stranded) == ("n1000.confirm attempt 1 ended: its segment stopped before it: "
                                  "the step before it did not succeed")
    fenced = TaskAttemptFailed(job_id="j", task_id="n1000.confirm", attempt=1, state="cancelled",
                               error="cancelled before any provisioner claimed it")
    assert describe(fenced) == "n1000.confirm attempt 1 cancelled: no provisioner claimed it before the cancel (it never ran)"
