"""`muster cluster apply PLAN` of a plan applied before answers with that plan's job (one plan,
one job), and says when that job has ended. Walk of session 24: a plan whose job an approver
rejected, applied again, said `apply accepted: job ..., cluster 6bfc... (a repeat of an earlier
request: same job)`, exit 0, as if it ran now; the job had failed (`rejected by ada: no`). And an
apply named the cluster by id alone, where every other operation names it `c1 (<id>)`."""

from __future__ import annotations

from typing import Any, cast

import pytest

from contracts.commands import Accepted, ApplyPlan
from muster.ops_session import Options, Session

CLUSTER, JOB, PLAN = "6bfc8503-4835-5750-8971-eb4249f87fa8", "c3f4d396-fd92-5cb5-ad60-9c2018932742", "8f57d3caf0772dcb3db4"


class Planner:
    requested_by = "alice"

    def __init__(self, duplicate: bool) -> None:
        self.duplicate = duplicate

    async def request(self, command: Any) -> Accepted:
        return Accepted(job_id=JOB, cluster_id=CLUSTER, duplicate=self.duplicate)


class Tracker:
    def __init__(self, state: str, error: str | None = None) -> None:
        self.job = {"id": JOB, "state": state, "error": error}

    async def cluster(self, ref: str, needs: str = "read") -> Any:
        from types import SimpleNamespace
        return SimpleNamespace(id=CLUSTER, name="c1")

    async def get(self, path: str, **_: Any) -> Any:
        assert path == f"/v1/jobs/{JOB}", path
        return self.job


def session(duplicate: bool, tracker: Tracker) -> Session:
    made = Session(Options(bus=cast(Any, None), wait=False, as_json=False, request_id=None, by=None, timeout=1.0))
    made.client = cast(Any, Planner(duplicate))
    made._tracker = cast(Any, tracker)
    return made


async def test_a_plan_applied_again_after_its_job_ended_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    await session(True, Tracker("failed", "rejected by ada: no")).execute(ApplyPlan(plan_id=PLAN, request_id="r", requested_by="alice"))
    assert capsys.readouterr().out == (
        f"apply accepted: job {JOB}, cluster c1 ({CLUSTER}) (a repeat of an earlier request: same job, which failed: "
        f"rejected by ada: no; nothing runs again: a new dry run makes a new plan)\n")


@pytest.mark.parametrize(("duplicate", "state", "said"), [
    (False, "running", ""), (True, "waiting_for_approval", " (a repeat of an earlier request: same job)")])
async def test_an_apply_names_its_cluster_and_a_live_repeat_as_before(capsys: pytest.CaptureFixture[str], duplicate: bool,
                                                                      state: str, said: str) -> None:
    await session(duplicate, Tracker(state)).execute(ApplyPlan(plan_id=PLAN, request_id="r", requested_by="alice"))
    assert capsys.readouterr().out == f"apply accepted: job {JOB}, cluster c1 ({CLUSTER}){said}\n"
