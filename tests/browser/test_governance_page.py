"""Governance in the console, in a real browser (conftest.py): a job that waits for approval
is listed so, shows its plan and is approved from its page; the governance page shows the schedules with
their next runs and the approval rules."""

from __future__ import annotations

import json
from typing import Any

from playwright.sync_api import expect

from .conftest import Muster

LONG = 90_000


def test_a_job_waiting_for_approval_is_approved_from_its_page(muster: Muster, page: Any) -> None:
    at = ["--data-dir", str(muster.data_dir)]
    # Only clusters named gated-*: the package's other tests share the tenant.
    muster.cli("rule", "add", "gated", "-o", "create", "--cluster", "gated-*", "--allow-self-approval", "--expires", "1h", *at)
    out = muster.cli("cluster", "create", "gated-1", "-t", "hadoop-small", "-n", "2", "--json", *at)
    answer = json.loads(out.stdout.splitlines()[0])
    assert answer["type"] == "Accepted" and any("waits for approval" in w for w in answer["warnings"]), answer
    muster.cli("schedule", "create", "nightly-check", "--cron", "0 3 * * *", *at, "--", "cluster", "check", "gated-1")

    # An approver finds it among the jobs waiting for approval (the tracker's index knows the state).
    page.goto("/ui/jobs?state=waiting_for_approval")
    page.get_by_test_id("jobs").locator(f"a[href='/ui/jobs/{answer['job_id']}']").click()
    expect(page.get_by_test_id("job-state")).to_contain_text("waiting")
    approval = page.get_by_test_id("approval")
    expect(approval).to_contain_text("gated")
    page.wait_for_function("window.musterGraphReady > 0")  # the plan that runs once approved
    assert page.locator("#tasks tbody tr").count() > 5
    page.get_by_test_id("check").click()  # what an approval now would find; nothing decided (decision 42)
    expect(page.get_by_test_id("decision-said")).to_contain_text("checked, nothing decided")
    expect(page.get_by_test_id("decision-said")).to_contain_text("/h once done at today's prices")
    expect(page.get_by_test_id("job-state")).to_contain_text("waiting")
    page.get_by_test_id("decision-comment").fill("looks right")
    page.get_by_test_id("approve").click()
    expect(page.get_by_test_id("decision-said")).to_have_text("approved")
    expect(page.get_by_test_id("job-state")).to_have_text("succeeded", timeout=LONG)
    page.reload()
    expect(page.get_by_test_id("approval-decision")).to_contain_text("approved by")
    expect(page.get_by_test_id("approval-decision")).to_contain_text("looks right")

    page.goto("/ui/governance")
    row = page.get_by_test_id("schedule").filter(has_text="nightly-check")
    expect(row).to_contain_text("cluster check gated-1")
    expect(row.get_by_test_id("next-run")).not_to_have_text("–")
    expect(page.get_by_test_id("rules")).to_contain_text("gated")
