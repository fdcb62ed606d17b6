"""A large job's page in a real browser (docs/ui.md, "Large jobs"): 3,000 tasks drawn as one
group per stage with counts, the DOM bounded, the tasks a page at a time (what needs a look
first), a group's tasks on demand, and a burst of updates coalesced into a few batches that
leave the latest state on screen. The job is written to `muster up`'s log as a planner writes it
(no planner runs it: its cluster does not exist), then ended."""

from __future__ import annotations

import asyncio
import re
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from playwright.sync_api import expect

from contracts import subjects
from contracts.events import (
    JobFailed,
    JobPlanned,
    JobRequested,
    PlannedTaskRecord,
    TaskAttemptFailed,
    TaskClaimed,
    TaskCompleted,
    TaskQueued,
    TaskSucceeded,
)
from muster.bus.connect import connect, read_credentials_file
from muster.bus.eventstore import Append, EventStore

from .conftest import Muster

NODES = 1000
STEPS = (("create", None), ("install", "base"), ("start", "base"))
SERVICES = {"solver", "planner", "tracker", "pool", "governance", "notifier"}
DONE = 60
"""Tasks of the first stage the burst runs to the end (and one more that fails)."""


def _tasks() -> list[PlannedTaskRecord]:
    return [PlannedTaskRecord(id=f"n{i:04d}.{a}" + (f".{s}" if s else ""), node=f"n{i:04d}", action=a, service=s)  # type: ignore[arg-type]
            for a, s in STEPS for i in range(NODES)]


class Writer:
    """Appends the job's events as `muster up`'s own planner and provisioner would (with their
    identities: only a planner may write a job's events, only a provisioner its claims)."""

    def __init__(self, muster: Muster, job_id: str) -> None:
        auth = muster.data_dir / "auth"
        self.url, self.job_id, self.version = muster.nats, job_id, 0
        self.planner = read_credentials_file(auth / "planner.cred")
        self.provisioner = next(p.stem for p in sorted(auth.glob("*.cred")) if p.stem not in SERVICES)
        self.provisioner_token = read_credentials_file(auth / f"{self.provisioner}.cred")

    async def _job(self, store: EventStore, *events: Any) -> None:
        for e in events:
            self.version += 1
            await store.append(subjects.job_events("default", self.job_id), [Append(e, f"{self.job_id}:{self.version}", self.job_id, self.version)])

    async def plan(self) -> None:
        tasks = _tasks()
        stages = [[t.id for t in tasks[k * NODES:(k + 1) * NODES]] for k in range(len(STEPS))]
        await self._run(JobRequested(tenant="default", job_id=self.job_id, cluster_id=str(uuid.uuid4()), operation="create",
                                     request={"nodes": NODES}, requested_by="test", planner="nobody"),
                        JobPlanned(job_id=self.job_id, tasks=tasks, links=[(stages[0], stages[1]), (stages[1], stages[2])], stages=stages))

    async def burst(self) -> None:
        """Each of DONE tasks queued, claimed, succeeded and taken (4 events); one more fails."""
        planner, provisioner = await connect(self.url, token=self.planner), await connect(self.url, token=self.provisioner_token)
        try:
            jobs, claims = EventStore(planner), EventStore(provisioner)
            pid, worker = self.provisioner, f"{self.provisioner}/w1"
            for t in _tasks()[:DONE + 1]:
                task_subject = subjects.task_events("default", self.job_id, t.id, self.provisioner)
                await self._job(jobs, TaskQueued(job_id=self.job_id, task_id=t.id, attempt=1, node=t.node, action=t.action))
                await claims.append(task_subject, [Append(TaskClaimed(job_id=self.job_id, task_id=t.id, attempt=1, provisioner=pid, worker=worker), f"c:{t.id}")])
                if t.node == f"n{DONE:04d}":
                    await self._job(jobs, TaskAttemptFailed(job_id=self.job_id, task_id=t.id, attempt=1, error="boom"))
                    continue
                await claims.append(task_subject, [Append(TaskSucceeded(job_id=self.job_id, task_id=t.id, attempt=1, provisioner=pid, worker=worker), f"s:{t.id}")])
                await self._job(jobs, TaskCompleted(job_id=self.job_id, task_id=t.id, attempt=1))
        finally:
            await planner.close()
            await provisioner.close()

    async def end(self) -> None:
        await self._run(JobFailed(job_id=self.job_id, reason="ended by the test"))

    async def _run(self, *events: Any) -> None:
        nc = await connect(self.url, token=self.planner)
        try:
            await self._job(EventStore(nc), *events)
        finally:
            await nc.close()


def test_a_large_job_page_is_bounded_aggregated_and_coalesces_its_updates(muster: Muster, page: Any) -> None:
    writer = Writer(muster, str(uuid.uuid4()))
    total = NODES * len(STEPS)
    with ThreadPoolExecutor(1) as thread:  # Playwright's sync API runs a loop in this one
        thread.submit(asyncio.run, writer.plan()).result(60)
        page.goto(f"/ui/jobs/{writer.job_id}")
        page.wait_for_selector("html[data-graph-ready]", state="attached")
        groups = page.get_by_test_id("graph-group")
        expect(groups).to_have_count(len(STEPS))
        expect(groups.nth(0).get_by_test_id("group-counts")).to_have_text(f"planned {NODES}")
        expect(page.locator("#tasks tbody tr")).to_have_count(100)
        expect(page.get_by_test_id("tasks-page")).to_contain_text(f"{total} of {total} tasks; page 1 of {total // 100}")
        elements = page.evaluate("document.getElementsByTagName('*').length")
        assert elements < 2500, f"{elements} elements for {total} tasks"

        groups.nth(1).get_by_role("link", name="its tasks").click()  # a group opens to at most 200 of its tasks
        chips = groups.nth(1).locator(".chip")
        expect(chips).to_have_count(200)
        expect(groups.nth(1)).to_contain_text(f"200 of {NODES} shown")
        chips.nth(3).click()
        expect(page.get_by_test_id("task-detail")).to_contain_text("n0003.install.base")

        expect(page.locator("#live")).to_have_class(re.compile(r"\bon\b"))
        thread.submit(asyncio.run, writer.burst()).result(60)
        counts = f"1 failed, {total - DONE - 1} planned, {DONE} succeeded (of {total})"
        expect(page.get_by_test_id("job-counts")).to_have_text(counts)
        expect(groups.nth(0).get_by_test_id("group-counts")).to_have_text(f"failed 1 · planned {NODES - DONE - 1} · succeeded {DONE}")
        expect(page.locator("#row-n0000\\.create .badge")).to_have_text("succeeded")
        expect(page.locator(f"#row-n{DONE:04d}\\.create .badge")).to_have_text("failed")
        batches = page.evaluate("window.musterApplied.length")
        assert batches < DONE, f"{batches} batches applied for {DONE * 4 + 2} updates: not coalesced"

        page.reload()  # the table shows what needs a look first
        expect(page.locator("#tasks tbody tr").first).to_have_id(f"row-n{DONE:04d}.create")
        page.goto(f"/ui/jobs/{writer.job_id}?state=succeeded&part=forward:1")
        expect(page.get_by_test_id("tasks-page")).to_contain_text(f"{DONE} of {total} tasks match")
        expect(page.locator("#tasks tbody tr")).to_have_count(DONE)

        thread.submit(asyncio.run, writer.end()).result(60)
        expect(page.locator("#live-text")).to_have_text("finished: failed")
        expect(page.get_by_test_id("job-state")).to_contain_text("failed")
