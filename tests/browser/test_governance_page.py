"""Governance in the console, in a real browser (conftest.py): a job that waits for approval
is listed so, shows its plan and is approved from its page (not by its requester, unless the rule
allows it); the governance page shows the schedules with their next runs and the approval rules."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from playwright.sync_api import expect

from contracts import subjects
from contracts.governance import GovernancePut
from contracts.records import Append
from muster.bus.connect import connect, read_credentials_file
from muster.bus.eventstore import EventStore

from .conftest import Muster
from .test_operate import person, sign_in

LONG = 90_000


def check_then_approve(page: Any, comment: str) -> None:
    """On a waiting job's page: `comment` typed, Check first (what an approval now would find,
    nothing decided: decision 42), then Approve; the job runs to its end, and the page is loaded
    again. The comment typed before Check first is kept, and the focus where it was: the page
    went back to itself without them (session 34), and the approval was recorded with no comment."""
    page.get_by_test_id("decision-comment").fill(comment)
    page.get_by_test_id("check").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("decision-said")).to_contain_text("checked, nothing decided")
    expect(page.get_by_test_id("decision-said")).to_contain_text("/h once done at today's prices")
    expect(page.get_by_test_id("job-state")).to_contain_text("waiting")
    expect(page.get_by_test_id("decision-comment")).to_have_value(comment)
    expect(page.get_by_test_id("check")).to_be_focused()
    page.get_by_test_id("approve").click()
    expect(page.get_by_test_id("decision-said")).to_have_text("approved")
    expect(page.get_by_test_id("job-state")).to_have_text("succeeded", timeout=LONG)
    page.reload()


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
    page.wait_for_selector("html[data-graph-ready]", state="attached")  # the plan that runs once approved
    assert page.locator("#tasks tbody tr").count() > 5
    check_then_approve(page, "looks right")
    expect(page.get_by_test_id("approval-decision")).to_contain_text("approved by")
    expect(page.get_by_test_id("approval-decision")).to_contain_text("looks right")

    page.goto("/ui/governance")
    row = page.get_by_test_id("schedule").filter(has_text="nightly-check")
    expect(row).to_contain_text("cluster check gated-1")
    expect(row.get_by_test_id("next-run")).not_to_have_text("–")
    expect(page.get_by_test_id("rules")).to_contain_text("gated")


def test_the_requester_is_not_offered_approve_and_told_who_decides(muster: Muster, page: Any) -> None:
    """Walk of session 27: the requester's page offered Approve, and the click was refused
    (docs/governance.md: never the requester unless every rule that matched allows self-approval,
    whatever its grants). Now it says why and offers Reject alone; the planner still refuses an
    approval sent anyway."""
    at = ["--data-dir", str(muster.data_dir)]
    asker = f"asker-{uuid.uuid4().hex[:6]}"  # may create and approve clusters, and read the templates
    token = json.loads(muster.cli("user", "create", asker, "--tenant", "default", "--json", *at).stdout)["token"]
    for permission, scope in (("write", "cluster:*"), ("approve", "cluster:*"), ("read", "catalog:*")):
        muster.cli("grant", asker, permission, "--scope", scope, "--tenant", "default", *at)
    muster.cli("rule", "add", "not-mine", "-o", "create", "--cluster", "not-mine-*", "--expires", "1h", *at)
    try:
        out = muster.cli("cluster", "create", "not-mine-1", "-t", "tiny-small", "-n", "1", "--json", *at, env={"MUSTER_TOKEN": token})
        made = json.loads(out.stdout.splitlines()[0])
        assert made["type"] == "Accepted" and "waits for approval" in made["warnings"][0], made
        sign_in(page, token, f"/ui/jobs/{made['job_id']}")
        expect(page.get_by_test_id("job-state")).to_contain_text("waiting")
        expect(page.get_by_test_id("approval-own")).to_contain_text("Waiting for another approver: you requested it")
        expect(page.get_by_test_id("approve")).to_have_count(0)
        expect(page.get_by_test_id("check")).to_have_count(0)
        expect(page.get_by_test_id("reject")).to_be_visible()

        # A form posted with approve anyway (an old page, a crafted request): still refused, in words.
        page.get_by_test_id("reject").evaluate("button => { button.value = 'approve'; }")
        page.get_by_test_id("reject").click()
        expect(page.get_by_test_id("decision-said")).to_have_text(
            f"refused: {asker} may not approve job {made['job_id']}: {asker} asked for it, and not every rule that matched "
            f"allows self-approval: another principal with approve on its cluster decides ({asker} may reject it)")
        expect(page.get_by_test_id("job-state")).to_contain_text("waiting")

        sign_in(page, person(muster, "approver", "approve", "cluster:*"), f"/ui/jobs/{made['job_id']}")
        expect(page.get_by_test_id("approve")).to_be_visible()
        expect(page.get_by_test_id("approval-own")).to_have_count(0)
        page.get_by_test_id("approve").click()
        expect(page.get_by_test_id("decision-said")).to_have_text("approved")
        page.reload()
        expect(page.get_by_test_id("approval-decision")).to_contain_text("approved by approver-")
    finally:
        muster.cli("rule", "delete", "not-mine", *at)


def test_the_requester_approves_its_own_job_when_every_rule_that_matched_allows_it(muster: Muster, page: Any) -> None:
    """The other side of the test above (session 28 reasoned it, none walked it): a rule with
    `--allow-self-approval` lets the requester decide, so its page offers Check first and Approve,
    and the approval goes through to the job's end. A second rule that matched and does not allow
    it takes that away again: every rule must."""
    at = ["--data-dir", str(muster.data_dir)]
    asker = f"self-{uuid.uuid4().hex[:6]}"
    token = json.loads(muster.cli("user", "create", asker, "--tenant", "default", "--json", *at).stdout)["token"]
    for permission, scope in (("write", "cluster:*"), ("approve", "cluster:*"), ("read", "catalog:*")):
        muster.cli("grant", asker, permission, "--scope", scope, "--tenant", "default", *at)
    muster.cli("rule", "add", "self-ok", "-o", "create", "--cluster", "self-ok-*", "--allow-self-approval", "--expires", "1h", *at)
    muster.cli("rule", "add", "self-ok-not-mixed", "-o", "create", "--cluster", "self-ok-mixed-*", "--expires", "1h", *at)
    as_asker = {"MUSTER_TOKEN": token}
    try:
        made = [json.loads(muster.cli("cluster", "create", name, "-t", "tiny-small", "-n", "1", "--json", *at, env=as_asker).stdout.splitlines()[0])
                for name in ("self-ok-1", "self-ok-mixed-1")]
        assert all(m["type"] == "Accepted" and "waits for approval" in m["warnings"][0] for m in made), made
        own, mixed = (m["job_id"] for m in made)

        sign_in(page, token, f"/ui/jobs/{mixed}")  # both rules matched, one of them forbids it
        expect(page.get_by_test_id("approval")).to_contain_text("self-ok-not-mixed")
        expect(page.get_by_test_id("approval-own")).to_contain_text("Waiting for another approver: you requested it")
        expect(page.get_by_test_id("approve")).to_have_count(0)
        page.get_by_test_id("reject").click()  # its requester may always reject it
        expect(page.get_by_test_id("decision-said")).to_have_text("rejected")

        page.goto(f"/ui/jobs/{own}")
        expect(page.get_by_test_id("job-state")).to_contain_text("waiting")
        expect(page.get_by_test_id("approval-own")).to_have_count(0)
        check_then_approve(page, "mine, and the rule lets me")
        expect(page.get_by_test_id("approval-decision")).to_contain_text(f"approved by {asker}: “mine, and the rule lets me”")
    finally:
        for rule in ("self-ok", "self-ok-not-mixed"):
            muster.cli("rule", "delete", rule, *at)


def test_a_decision_taken_elsewhere_shows_on_the_open_page_and_who_may_not_decide_is_told_why(muster: Muster, page: Any) -> None:
    """Session 34's walk, a tenant's user with its own token: its job waited for approval, an
    admin approved it from the CLI, and the open page went on saying "Waits for approval" and
    offering Reject after the job had run (the stream moved the tasks, never the approval). And a
    user without `approve` saw no Approve and no word why: the page now says the grant, in the
    API's words."""
    at = ["--data-dir", str(muster.data_dir)]
    muster.cli("rule", "add", "elsewhere", "-o", "create", "--cluster", "elsewhere-*", "--allow-self-approval", "--expires", "1h", *at)
    try:
        writer = person(muster, "writer", "write", "cluster:*")  # may create, not approve (self-approval allowed or not)
        out = muster.cli("cluster", "create", "elsewhere-1", "-t", "tiny-small", "-n", "1", "--json", *at, env={"MUSTER_TOKEN": writer})
        made = json.loads(out.stdout.splitlines()[0])
        assert made["type"] == "Accepted" and "waits for approval" in made["warnings"][0], made
        job, cluster = made["job_id"], made["cluster_id"]

        sign_in(page, person(muster, "reader", "read", "tenant"), f"/ui/jobs/{job}")  # neither its requester nor an approver
        why = page.get_by_test_id("approval-why")
        expect(why).to_contain_text(f"has no approve permission on job {job}")
        expect(why).to_contain_text(f"approve --scope cluster:{cluster}")
        expect(page.locator("#decide")).to_have_count(0)

        sign_in(page, writer, f"/ui/jobs/{job}")  # its requester: may reject it; approving needs the grant
        expect(page.get_by_test_id("approval-why")).to_contain_text("You may reject it, as its requester")
        expect(page.get_by_test_id("approve")).to_have_count(0)
        page.get_by_test_id("decision-comment").fill("was about to")  # typing, focus in the form
        muster.cli("job", "approve", job, "--comment", "from the shell", *at)
        decision = page.get_by_test_id("approval-decision")
        said = re.compile(r"^Approval: approved by [\w-]+: “from the shell”$")  # (the operator's name: the tests' in-process CLI's)
        expect(decision).to_have_text(said)  # no reload: the stream said it
        expect(page.locator("#decide")).to_have_count(0)
        expect(decision).to_be_focused()  # the keyboard is not left on a form that went away
        expect(page.get_by_test_id("job-state")).to_have_text("succeeded", timeout=LONG)
        page.reload()  # as the server renders it
        expect(page.get_by_test_id("approval-decision")).to_have_text(said)
    finally:
        muster.cli("rule", "delete", "elsewhere", *at)


def stored_as_an_older_muster(muster: Muster, name: str, source: str) -> None:
    """A policy put in the log as a muster before today's checks of `policy apply` wrote it (with
    the governance service's identity: only it writes governance events)."""
    async def put() -> None:
        nc = await connect(muster.nats, name="older-muster", token=read_credentials_file(muster.data_dir / "auth" / "governance.cred"))
        try:
            subject = subjects.governance_events("default", "policy", name)
            await EventStore(nc).append(subject, [Append(GovernancePut(kind="policy", name=name, version=1, by="ada",
                                                                       entity={"name": name, "source": source}),
                                                         msg_id=f"{subject}:1")])
        finally:
            await nc.close()

    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API owns this thread's event loop
        pool.submit(asyncio.run, put()).result(60)


def test_a_policy_stored_before_a_check_is_shown_to_deny_everything_with_its_check_and_how_to_end_it(
        muster: Muster, page: Any) -> None:
    """Decision 49: a policy the log holds from before a check it now fails denies every operation
    it judges. `muster policy list` warned; the console's governance page listed it as any other
    (session 34). It says so at its top and at the policy: which, its version, the check with its
    line, and the command that deletes it."""
    at = ["--data-dir", str(muster.data_dir)]
    unbound = 'package muster.lim\nimport rego.v1\n\ndeny contains "too big" if {\n  input.request.nodes > limit\n}\n'
    stored_as_an_older_muster(muster, "lim", unbound)
    try:
        page.goto("/ui/governance")
        top = page.get_by_test_id("policies-failing")
        expect(top).to_contain_text("1 policy denies every operation it judges (fail closed)")
        line = top.get_by_test_id("policy-failing")
        expect(line).to_contain_text("lim version 1: (line 5) reads limit, which no rule")
        expect(line).to_contain_text("delete it: muster policy delete lim")
        expect(line.locator("code").filter(has_text="muster policy delete lim")).to_have_count(1)
        checks = page.get_by_test_id("policy-checks")
        expect(checks).to_be_visible()  # its details opened
        expect(checks).to_contain_text("(line 5) reads limit")
        expect(checks).to_contain_text("until it is applied again corrected or deleted (muster policy delete lim)")
        # What the CLI's list warns of, in the same words.
        said = muster.cli("policy", "list", *at)
        assert "warning: policy 'lim' (version 1) fails a check `muster policy apply` makes now: (line 5) reads `limit`" in said.stderr
    finally:
        muster.cli("policy", "delete", "lim", *at)
    page.reload()
    expect(page.get_by_test_id("policies-failing")).to_have_count(0)
