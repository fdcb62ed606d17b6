"""`muster cluster create web ...` answers `create accepted: job ..., cluster web (<id>)`, as
every other operation names its cluster (`expand accepted: job ..., cluster web (<id>)`). Walk of
session 24: a create said the id alone, the one operation whose name the command was given."""

from __future__ import annotations

from typing import Any, cast

import pytest

from contracts.commands import Accepted, CreateCluster
from muster.ops_session import Options, Session

CLUSTER, JOB = "c9874cba-f3cf-566f-ada4-a95867329d9e", "b7cac37a-f16f-5d96-a7a1-12c40aedef8b"


class Planner:
    requested_by = "alice"

    async def request(self, command: Any) -> Accepted:
        return Accepted(job_id=JOB, cluster_id=CLUSTER)


async def test_a_create_is_answered_with_its_clusters_name_and_id(capsys: pytest.CaptureFixture[str]) -> None:
    session = Session(Options(bus=cast(Any, None), wait=False, as_json=False, request_id=None, by=None, timeout=1.0))
    session.client = cast(Any, Planner())
    await session.execute(CreateCluster(name="c4", template="hadoop-small", nodes=20, request_id="r", requested_by="alice"))
    assert capsys.readouterr().out == f"create accepted: job {JOB}, cluster c4 ({CLUSTER})\n"
