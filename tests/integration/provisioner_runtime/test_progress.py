"""A plugin's progress lines on a real nats-server: the worker appends them in order before the
attempt's outcome, secrets masked, and the tracker's job stream delivers them while the attempt
still runs."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from contracts import subjects
from contracts.events import JobRequested
from contracts.records import Append
from muster.bus.eventstore import EventStore
from muster.tracker_client import _server_sent
from services.provisioner.plugins import PluginRegistry
from services.provisioner.plugins.testing import make_task
from services.tracker.http import make_app

from .conftest import DEADLINE_S, Bench

PASSWORD = "talk-pass-W4k9"

TALKER = '''
import asyncio
from services.provisioner.plugins import AutomatorPlugin, succeeded

class Talker(AutomatorPlugin):
    """Says three lines, then waits until the test lets it finish."""
    gate = None

    async def run(self, action, ctx):
        ctx.progress("TASK [install] ok")
        ctx.progress("TASK [configure] using " + ctx.task.config["password"])
        ctx.progress("TASK [start] waiting")
        await type(self).gate.wait()
        return succeeded(stdout="all done")
'''


async def test_progress_lines_reach_the_log_and_the_job_stream_before_the_outcome(bench: Bench, tmp_path: Path) -> None:
    folder = tmp_path / "plugins" / "talker"
    folder.mkdir(parents=True)
    (folder / "plugin.json").write_text(json.dumps({"name": "talker", "type": "automator", "version": "1",
                                                    "actions": ["install"], "entry_point": "talker:Talker"}))
    (folder / "talker.py").write_text(TALKER)
    registry = PluginRegistry.discover([tmp_path / "plugins"], secrets={"@secrets": {"pw": PASSWORD}}, work_dir=tmp_path / "w")
    bench.stack.push_async_callback(registry.aclose)
    talker: Any = type(registry.automator("talker"))
    talker.gate = asyncio.Event()
    await bench.workers(registry, "p-talk")

    store = EventStore(bench.nc)
    job_id = str(uuid.uuid4())
    task = make_task("install", service="svc", automator="talker", tenant=bench.tenant, cluster_id=f"c-{bench.tenant}",
                     config={"password": "secret://pw"}).model_copy(update={"job_id": job_id})
    requested = JobRequested(tenant=bench.tenant, job_id=job_id, cluster_id=task.cluster_id, operation="create", request={})
    await store.submit(subjects.job_events(bench.tenant, job_id), Append(requested, msg_id=f"{job_id}.requested"))

    http = TestClient(TestServer(make_app(EventStore(bench.nc))),
                      headers={"Authorization": f"Bearer {os.environ['MUSTER_TOKEN']}", "X-Muster-Tenant": bench.tenant})
    await http.start_server()
    bench.stack.push_async_callback(http.close)
    resp = await http.get(f"/v1/jobs/{job_id}/stream")
    assert resp.status == 200

    await bench.nc.jetstream().publish(subjects.task_queue(bench.tenant, task.provisioner_class), task.model_dump_json().encode(),
                                       headers={"Nats-Msg-Id": f"{job_id}.{task.task_id}.1"})
    streamed: list[dict[str, Any]] = []
    async with asyncio.timeout(DEADLINE_S):
        async for kind, data in _server_sent(resp.content):  # the CLI's own reader
            if kind == "progress" and data["type"] == "TaskProgressed":
                streamed.append(data)
                if len(streamed) == 3:
                    break
    # All three lines came through the tracker while the plugin still runs: no outcome yet.
    assert not talker.gate.is_set() and not bench.log.of("TaskSucceeded")
    assert [(d["n"], d["line"], d["task_id"], d["attempt"]) for d in streamed] == [
        (1, "TASK [install] ok", task.task_id, 1), (2, "TASK [configure] using ********", task.task_id, 1),
        (3, "TASK [start] waiting", task.task_id, 1)]
    resp.close()

    talker.gate.set()
    await bench.log.wait_for(lambda log: bool(log.of("TaskSucceeded")))
    mine = [r for r in bench.log.events if r.subject.startswith(f"{subjects.EVT}.{bench.tenant}.task.")]
    assert [r.type for r in mine] == ["TaskClaimed", "TaskProgressed", "TaskProgressed", "TaskProgressed", "TaskSucceeded"]
    assert [r.event.n for r in mine if r.type == "TaskProgressed"] == [1, 2, 3]
    assert {r.subject for r in mine if r.type == "TaskProgressed"} == {
        subjects.task_progress(bench.tenant, job_id, task.task_id, "p-talk")}
    assert all(PASSWORD not in r.event.model_dump_json() for r in mine)
