"""A running attempt's progress lines: ansible-runner's events become lines as they come, the
registry masks the task's secrets in them, the worker's reporter bounds them (count, rate,
length) and stops at the outcome."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from contracts.events import PROGRESS_LINE_MAX
from contracts.records import Append
from services.provisioner import progress
from services.provisioner.plugins import PluginRegistry
from services.provisioner.plugins.builtin.ansible.events import AnsibleLog
from services.provisioner.plugins.testing import make_task
from services.provisioner.progress import MORE, Reporter

PASSWORD = "redis-pass-Q8v3"

# One Ansible run as ansible-runner hands its events to the handler (the fields muster reads).
RUN: list[dict[str, Any]] = [
    {"event": "playbook_on_task_start", "event_data": {"task": "install redis"}},
    {"event": "runner_on_ok", "event_data": {"task": "install redis", "host": "n1", "res": {"changed": True}}},
    {"event": "runner_on_skipped", "event_data": {"task": "tune the kernel", "host": "n1"}},
    {"event": "runner_on_ok", "event_data": {"task": "debug", "host": "n1", "res": {"msg": f"auth is {PASSWORD}"}}},
    {"event": "runner_on_failed", "event_data": {"task": "start redis", "host": "n1", "res": {"msg": "exit 1\nno config"}}},
    {"event": "runner_on_unreachable", "event_data": {"task": "check", "host": "n2", "res": {"msg": "timed out"}}},
    {"event": "playbook_on_stats", "event_data": {"ok": {"n1": 2}, "changed": {"n1": 1}, "failures": {"n1": 1},
                                                  "skipped": {"n1": 1}, "dark": {"n2": 1}}},
]
LINES = [
    "changed: [n1] install redis",
    "skipping: [n1] tune the kernel",
    "ok: [n1] debug: auth is ********",
    "failed: [n1] start redis: exit 1 no config",
    "unreachable: [n2] check: timed out",
    "recap: ok=2, changed=1, failures=1, skipped=1, dark=1",
]

REPLAY = '''
import asyncio, json, threading
from services.provisioner.plugins import AutomatorPlugin, succeeded
from services.provisioner.plugins.builtin.ansible.events import AnsibleLog

class Replay(AutomatorPlugin):
    """Hands recorded ansible-runner events to the ansible automator's handler, from a thread of
    its own as ansible-runner does."""
    async def run(self, action, ctx):
        log = AnsibleLog(ctx.progress)
        events = json.loads(ctx.fields["events"].replace("@password@", ctx.task.config["password"]))
        await asyncio.to_thread(lambda: [log.handle(e) for e in events])
        return succeeded(stdout=log.text())
'''


class Store:
    """The event log's `submit`, in memory: what was appended, in order."""

    def __init__(self) -> None:
        self.appended: list[tuple[str, Append]] = []

    def submit(self, subject: str, item: Append, *, now: bool = False) -> asyncio.Future[int]:
        self.appended.append((subject, item))
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        done.set_result(len(self.appended))
        return done

    @property
    def events(self) -> list[Any]:
        return [a.event for _, a in self.appended]

    @property
    def lines(self) -> list[str]:
        return [e.line for e in self.events]


@pytest.fixture
async def reg(tmp_path: Path) -> AsyncIterator[PluginRegistry]:
    folder = tmp_path / "p" / "replay"
    folder.mkdir(parents=True)
    (folder / "plugin.json").write_text(json.dumps({
        "name": "replay", "type": "automator", "version": "1", "actions": ["configure"], "entry_point": "replay:Replay",
        "fields": {"events": {"label": "Events", "type": "text"}},
    }))
    (folder / "replay.py").write_text(REPLAY)
    r = PluginRegistry.discover([tmp_path / "p"], secrets={"@secrets": {"redis": PASSWORD}}, work_dir=tmp_path / "w")
    yield r
    await r.aclose()


def test_each_ansible_task_result_is_a_line_as_it_comes() -> None:
    got: list[str] = []
    log = AnsibleLog(got.append)
    for event in RUN:
        log.handle(json.loads(json.dumps(event).replace(PASSWORD, "********")))
    assert got == LINES
    assert log.text().splitlines() == LINES  # the outcome's output: the same lines



def test_a_failed_command_names_what_the_program_said_not_only_its_exit_status() -> None:
    log = AnsibleLog()
    res = {"msg": "non-zero return code", "rc": 1, "stdout": "",
           "stderr": "\n*** FATAL CONFIG FILE ERROR ***\n>>> 'maxmemory lots'\nargument must be a memory value"}
    log.handle({"event": "runner_on_failed", "event_data": {"task": "test the new config", "host": "n1", "res": res}})
    assert log.failure == ("ansible task 'test the new config' failed on n1: non-zero return code: "
                           "*** FATAL CONFIG FILE ERROR *** >>> 'maxmemory lots' argument must be a memory value")

async def test_the_lines_reach_the_log_with_the_tasks_secrets_masked(reg: PluginRegistry) -> None:
    task = make_task("configure", service="redis", automator="replay", config={"password": "secret://redis"},
                     action_fields={"events": json.dumps(RUN).replace(PASSWORD, "@password@")})
    store = Store()
    reporter = Reporter(store, task, "muster.evt.t1.task.j.t.p1.progress", "p1", "p1/w0")
    progress.current.set(reporter)
    try:
        out = await reg.execute(task)
    finally:
        progress.current.set(None)
    reporter.close()
    assert out.ok, out.error
    assert store.lines == LINES
    assert all(PASSWORD not in a.event.model_dump_json() for _, a in store.appended)
    events = store.events
    assert [e.n for e in events] == list(range(1, len(LINES) + 1))
    assert {(e.job_id, e.task_id, e.attempt, e.provisioner, e.worker) for e in events} == {(task.job_id, task.task_id, 1, "p1", "p1/w0")}
    assert [a.msg_id for _, a in store.appended] == [f"{task.job_id}.{task.task_id}.1.progress.{n}" for n in range(1, 7)]


async def test_a_chatty_plugin_is_bounded_in_count_rate_and_length() -> None:
    task = make_task("configure", service="s")
    store = Store()
    reporter = Reporter(store, task, "s", "p1", "p1/w0", limit=5, burst=3, per_second=0.0)
    reporter("x" * (PROGRESS_LINE_MAX + 50))
    reporter("two\nlines")
    reporter("three")
    for _ in range(4):
        reporter("too many at once")  # no token left: counted, dropped
    reporter.close()
    reporter("after the outcome")  # nothing after close
    assert store.lines[0] == "x" * (PROGRESS_LINE_MAX - 1) + "…"
    assert store.lines[1:] == ["two lines", "three", "… 4 more lines left out (too many at once): the attempt's output has them"]
    assert store.events[-1].skipped == 4

    capped = Store()
    reporter = Reporter(capped, task, "s", "p1", "p1/w0", limit=3, burst=100)
    for n in range(10):
        reporter(f"line {n}")
    reporter.close()
    assert capped.lines == ["line 0", "line 1", MORE]


async def test_a_line_from_another_thread_arrives_in_order_without_blocking_it() -> None:
    task = make_task("configure", service="s")
    store = Store()
    reporter = Reporter(store, task, "s", "p1", "p1/w0")
    returned = threading.Event()

    def chatty() -> None:
        for n in range(5):
            reporter(f"line {n}")
        returned.set()

    await asyncio.to_thread(chatty)
    assert returned.is_set()
    reporter.close()
    assert store.lines == [f"line {n}" for n in range(5)]
