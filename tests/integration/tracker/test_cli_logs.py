"""`muster logs JOB [TASK]` against a real server (session 36's walk: a tenant's user had no
command that printed what a task said; its stdout was in the console's task page and in
`muster events --subject 'task.<job>.>'` as JSON only)."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from click.testing import Result

from contracts.events import JobSucceeded
from tests import cli_in_process

pytestmark = pytest.mark.nats

Tracked = Any


async def test_logs_print_each_attempts_output_and_a_task_nobody_ran_is_said(tracked: Tracked) -> None:
    reply = await tracked.create(nodes=2)
    assert isinstance(await tracked.client.wait(reply.job_id, timeout=60), JobSucceeded)
    await tracked.indexed_final(reply.job_id)
    url = str(tracked.http.make_url("")).rstrip("/")

    async def muster(*args: str) -> Result:
        return await cli_in_process.ran(("logs", reply.job_id, *args, "--nats-url", tracked.url, "--tracker-url", url),
                                        dict(os.environ), 120, catch_exceptions=False)

    one = await muster("n1000.create")
    assert one.exit_code == 0, one.output
    lines = one.output.splitlines()
    assert lines[0].startswith("n1000.create attempt 1: succeeded on prov-test/") and lines[1] == "  stdout:"
    assert "[simulated create] node n1000" in lines[2]
    every = await muster()
    assert every.exit_code == 0 and "n1001.create attempt 1: succeeded" in every.output and "install" in every.output
    as_json = [json.loads(line) for line in (await muster("n1000.create", "--json")).output.splitlines()]
    assert [(o["task_id"], o["attempt"], o["state"]) for o in as_json] == [("n1000.create", 1, "succeeded")]
    none = await muster("n9999.create")
    assert none.exit_code == 2 and f"task n9999.create of job {reply.job_id} has no attempt a provisioner took yet" in none.output
