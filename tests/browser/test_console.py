"""The console in a real browser, against real processes (conftest.py): what an operator does."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from playwright.sync_api import expect

from .conftest import Muster
from .test_operate import sign_in

LONG = 90_000  # ms: a whole job on the simulated cloud, with room for a busy machine


def test_a_cluster_created_with_the_cli_reaches_succeeded_live_on_its_job_page(muster: Muster, page: Any) -> None:
    # On the slow provider (700-900 ms a machine task): on the quick one a 3-node job could end
    # before a slower host's browser had opened its page (seen on a fresh clone, session 4).
    created = muster.create("live", "slow-small", 3)
    page.goto(f"/ui/jobs/{created['job_id']}")
    state = page.get_by_test_id("job-state")
    first = state.inner_text()
    assert first != "succeeded", "the job ended before its page opened: nothing was watched live"
    page.evaluate("window.sameDocument = true")
    page.wait_for_selector("html[data-graph-ready]", state="attached")
    expect(state).to_have_text("succeeded", timeout=LONG)
    # It changed without a reload: the same document got the stream's events.
    assert page.evaluate("window.sameDocument === true")
    expect(page.locator("#timeline")).to_contain_text("job succeeded")
    expect(page.get_by_test_id("job-counts")).to_contain_text("succeeded")
    expect(page.locator("#tasks .t-state .badge").filter(has_not_text="succeeded")).to_have_count(0)
    assert page.locator("#tasks tbody tr").count() > 20
    # The end reads as the page reloaded would: when it finished, and every stage done.
    expect(page.locator("#live-text")).to_have_text("finished: succeeded")
    expect(page.locator("#job-finished time")).to_have_count(1)
    expect(page.locator("#job-stage")).to_have_text(re.compile(r"^all done of \d+$"))
    # The graph shows each task with its state in words, not only in colour.
    chip = page.locator(".chip").first
    assert chip.get_attribute("class").endswith("st-succeeded")
    expect(chip.locator("text").nth(1)).to_have_text(re.compile("^succeeded"))
    # The cluster page: layout, its job, the history and the slider back to the start.
    page.get_by_role("link", name="live", exact=True).first.click()  # named as its people named it
    expect(page.get_by_test_id("cluster-name")).to_have_text("live")
    expect(page.get_by_test_id("replay-status")).to_contain_text("active")
    slider = page.locator("#at")
    # The page's script has run (it names the point; it listens to the slider before): a Home
    # pressed before it moved the slider unheard, and the state stayed "active" (session 36's
    # fresh-clone run, the page shown but its script not yet run).
    expect(slider).to_have_attribute("aria-valuetext", re.compile(r"\(latest\)$"))
    slider.focus()
    page.keyboard.press("Home")  # keyboard: the first event of the cluster's history
    expect(page.get_by_test_id("replay-status")).to_contain_text("pending", timeout=LONG)  # (a replay on the server)
    assert "seq=" in page.url
    # A point of the history is not the cluster now: no "State now", no change forms (as ?seq=N renders)
    expect(page.locator("#h-state")).to_have_text("State at a point of its history")
    expect(page.get_by_test_id("operations")).to_be_hidden()
    page.keyboard.press("End")
    expect(page.locator("#h-state")).to_have_text("State now")
    expect(page.get_by_test_id("operations")).to_be_visible()


def test_a_clusters_page_says_when_the_cluster_changed_and_its_job_ended(muster: Muster, page: Any) -> None:
    # A cluster's page stayed as rendered: "busy with its create job ..., the planner refuses
    # changes until it ends" went on being said long after the job had ended.
    created = muster.create("changing", "slow-small", 2)
    page.goto(f"/ui/clusters/{created['cluster_id']}")
    busy = page.get_by_test_id("ops-busy")
    expect(busy).to_be_visible()
    notice = page.get_by_test_id("cluster-changed")
    page.evaluate("window.sameDocument = true")
    expect(notice).to_contain_text("JobSucceeded", timeout=LONG)  # the last event so far: the job's end
    expect(busy).to_be_hidden()
    assert page.evaluate("window.sameDocument === true")  # said on the page as it was, not by a reload
    notice.get_by_role("link", name="Reload").click()
    expect(page.get_by_test_id("cluster-changed")).to_be_hidden()
    expect(page.get_by_test_id("ops-busy")).to_have_count(0)


def test_a_failing_task_shows_its_retries_and_the_rollback_and_retry_starts_it_again(muster: Muster, page: Any) -> None:
    created = muster.create("broken", "broken-small", 2)
    page.goto(f"/ui/jobs/{created['job_id']}?group=stage")
    expect(page.get_by_test_id("job-state")).to_have_text("rolled back", timeout=LONG)
    expect(page.get_by_test_id("job-error")).to_contain_text("broken")
    expect(page.locator("#job-stage")).to_have_text(re.compile(r"^stopped at \d+ of \d+$"))  # not where it is
    failed = page.locator("#tasks tbody tr", has=page.locator(".badge", has_text="failed")).first
    expect(failed.locator(".t-attempt")).to_have_text("3")
    failed.locator("a.task-link").click()
    detail = page.get_by_test_id("task-detail")
    expect(detail.get_by_test_id("attempt")).to_have_count(3)
    expect(detail).to_contain_text("retry")
    expect(detail.get_by_test_id("attempt-error").first).to_contain_text("fail")
    assert "task=" in page.url
    # The rollback's own tasks are in the graph and the table, and the timeline says why.
    assert page.locator("#tasks tbody tr td:nth-child(2)", has_text="rollback").count() > 0
    expect(page.locator("#timeline")).to_contain_text("rollback planned")
    # Retry from the page: accepted, and the page follows the new run live to its end.
    page.get_by_role("button", name="Retry").click()
    expect(page.get_by_test_id("control-said")).to_have_text("retry: accepted")
    expect(page.locator("#timeline")).to_contain_text("job retried", timeout=LONG)
    expect(page.get_by_test_id("job-state")).to_have_text("rolled back", timeout=LONG)


def test_pause_and_resume_from_the_page(muster: Muster, page: Any) -> None:
    created = muster.create("slow", "slow-small", 2)
    page.goto(f"/ui/jobs/{created['job_id']}")
    state = page.get_by_test_id("job-state")
    said = page.get_by_test_id("control-said")
    expect(page.get_by_role("button", name="Resume")).to_be_hidden()  # only what the job's state allows
    page.get_by_role("button", name="Pause").click()
    expect(said).to_have_text("pause: accepted")
    expect(state).to_have_text("paused", timeout=LONG)
    expect(page.get_by_role("button", name="Pause")).to_be_hidden()
    page.get_by_role("button", name="Resume").click()
    expect(said).to_have_text("resume: accepted")
    expect(state).to_have_text("succeeded", timeout=LONG)
    for verb in ("Pause", "Resume", "Cancel", "Retry"):  # a finished job offers none
        expect(page.get_by_role("button", name=verb)).to_be_hidden()
    expect(page.locator("#timeline")).to_contain_text("job paused")
    # A post anyway gets the planner's reason, as it gave it.
    csrf = page.locator('meta[name="csrf-token"]').get_attribute("content")
    answer = page.request.post(f"/ui/jobs/{created['job_id']}/control", form={"action": "pause", "csrf": csrf},
                               headers={"Origin": page.url.split("/ui/")[0], "Accept": "application/json"})
    assert re.match(r"^rejected: .+ nothing to pause$", answer.json()["said"]), answer.json()


def test_another_tenants_cluster_is_not_reachable_by_url(muster: Muster, page: Any) -> None:
    muster.cli("catalog", "apply", str(muster.catalog), "--tenant", "other", "--data-dir", str(muster.data_dir))
    theirs = muster.create("theirs", "hadoop-small", 2, tenant="other")
    for url in (f"/ui/clusters/{theirs['cluster_id']}", f"/ui/jobs/{theirs['job_id']}",
                f"/ui/jobs/{theirs['job_id']}/tasks/n1000.create", f"/ui/clusters/{theirs['cluster_id']}/at?seq=1"):
        response = page.goto(url)
        assert response.status == 404, url
        expect(page.get_by_test_id("error")).to_contain_text("tenant default")
    stream = page.request.get(f"/ui/jobs/{theirs['job_id']}/stream")
    assert stream.status == 404
    page.goto("/ui/clusters")
    expect(page.get_by_test_id("tenant")).to_have_text("default")
    assert page.get_by_text("theirs").count() == 0
    # Signed in with a token of that tenant's user who may read that cluster, the same URL shows
    # it; reading is not executing: its job page offers no job control.
    muster.cli("tenant", "create", "other", "--data-dir", str(muster.data_dir), check=False)  # exists after a rerun
    otto = f"otto-{uuid.uuid4().hex[:6]}"
    made = json.loads(muster.cli("user", "create", otto, "--tenant", "other", "--data-dir", str(muster.data_dir), "--json").stdout)
    muster.cli("grant", otto, "read", "--scope", f"cluster:{theirs['cluster_id']}", "--tenant", "other", "--data-dir", str(muster.data_dir))
    page.goto(f"/ui/sign-in?next=/ui/clusters/{theirs['cluster_id']}")
    page.get_by_label("Access token").fill(made["token"])
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_test_id("cluster-name")).to_have_text("theirs")
    expect(page.get_by_test_id("tenant")).to_have_text("other")
    page.goto(f"/ui/jobs/{theirs['job_id']}")
    expect(page.get_by_test_id("job-counts")).to_be_visible()
    expect(page.get_by_role("button", name="Pause")).to_have_count(0)


def test_the_cluster_list_hides_deleted_clusters_unless_asked_as_the_cli_does(muster: Muster, page: Any) -> None:
    """Walk of session 24: the console listed deleted clusters among the live ones, where `muster
    cluster list` shows them only with `--all`."""
    name = f"gone-{uuid.uuid4().hex[:6]}"
    made = muster.create(name, "tiny-small", 1)
    data = ("--data-dir", str(muster.data_dir))
    muster.cli("watch", made["job_id"], *data)
    muster.cli("cluster", "delete", name, "--wait", *data)
    page.goto("/ui/clusters")
    expect(page.get_by_role("link", name=name, exact=True)).to_have_count(0)
    toggle = page.get_by_test_id("deleted-toggle")
    expect(page.get_by_test_id("deleted-clusters")).to_contain_text(re.compile(r"\d+ deleted clusters? hidden"))
    toggle.click()
    assert page.url.endswith("/ui/clusters?all=1")
    row = page.locator("[data-testid=clusters] tbody tr", has=page.get_by_role("link", name=name, exact=True))
    expect(row).to_contain_text("deleted")
    # A deleted cluster costs nothing now; the live ones' total is `muster cluster cost`'s.
    expect(row.get_by_test_id("cluster-cost")).to_have_text("–")
    expect(page.get_by_test_id("clusters-cost")).to_contain_text(re.compile(r"^Together \d+\.\d+/h for \d+ nodes? in \d+ live clusters?, "))
    page.get_by_test_id("deleted-toggle").click()  # and back
    expect(page.get_by_role("link", name=name, exact=True)).to_have_count(0)


def test_unknown_ids_and_pages_say_so(page: Any) -> None:
    unknown = str(uuid.uuid4())
    for url, text in ((f"/ui/jobs/{unknown}", f"There is no job {unknown} in tenant default."),
                      (f"/ui/clusters/{unknown}", f"There is no cluster {unknown} in tenant default."),
                      (f"/ui/jobs/{unknown}/tasks/n1000.create", f"There is no job {unknown} in tenant default."),
                      ("/ui/clusters/not-an-id", "There is no cluster named 'not-an-id' in tenant default."),
                      ("/ui/nowhere", "The console has no page /ui/nowhere.")):
        response = page.goto(url)
        assert response.status == 404, url
        expect(page.get_by_test_id("error")).to_have_text(text)
        expect(page).to_have_title(re.compile("^Not found"))


def test_catalog_and_provisioners_pages(muster: Muster, page: Any) -> None:
    page.goto("/ui/catalog")
    template = page.get_by_test_id("template").filter(has_text="hadoop-small")
    expect(template).to_contain_text("Can't coexist")
    expect(template).to_contain_text("hdfs-namenode / hdfs-datanode")
    expect(page.get_by_test_id("services")).to_contain_text("hdfs-datanode")
    expect(page.get_by_test_id("provider").filter(has_text="slowsim")).to_contain_text("700-900")
    page.goto("/ui/provisioners")
    expect(page.get_by_test_id("provisioners")).to_contain_text("ready")
    page.goto("/ui/pools")
    expect(page.get_by_role("heading", name="Resource pools")).to_be_visible()


def test_a_phone_sized_screen_keeps_the_job_page_usable(muster: Muster, page: Any) -> None:
    created = muster.create("phone", "hadoop-small", 2)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"/ui/jobs/{created['job_id']}")
    expect(page.get_by_test_id("job-state")).to_have_text("succeeded", timeout=LONG)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390 + 1, "the page scrolls sideways on a phone"
    page.keyboard.press("Tab")  # the first stop is the skip link
    expect(page.locator(".skip")).to_be_focused()



_STATE_WHEN_LINES_SHOWED = """() => {
  window.stateWhenLinesShowed = null;
  const seen = new MutationObserver(() => {
    const lines = document.querySelector('[data-testid="task-detail"] [data-testid="attempt-lines"]');
    if (!lines || !lines.textContent.includes("TASK [configure redis]")) return;
    const row = [...document.querySelectorAll("#tasks tbody tr")]
      .find((tr) => (tr.querySelector("a.task-link")?.textContent || "").includes("install.talky"));
    window.stateWhenLinesShowed = row ? row.querySelector(".t-state").textContent.trim() : "no row";
    seen.disconnect();
  });
  seen.observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


def test_a_running_attempts_progress_lines_show_live_under_its_task_and_on_the_tasks_own_page(muster: Muster, page: Any) -> None:
    # talky's install (browser conftest) reports two lines through the simulated automator, then
    # runs 15 s: with 4 s, at load 20, the page showed the lines only once the task had succeeded
    # (the stream's batches, a frame, the panel fetched again: each slow on a loaded machine).
    # The task's own page follows the same attempt in a second tab (one 15 s job for both: the
    # page a task's link shares, /ui/jobs/{id}/tasks/{task}, said "Progress (live)" and stayed as
    # rendered: a reader saw the attempt "claimed" long after it had succeeded).
    created = muster.create("talking", "talky-small", 1)
    page.goto(f"/ui/jobs/{created['job_id']}")
    page.evaluate("window.sameDocument = true")
    # The task's state as the page showed it when both lines did, taken by the page itself (a
    # check of the row after Playwright saw the lines adds Playwright's own round trips).
    page.evaluate(_STATE_WHEN_LINES_SHOWED)
    row = page.locator("#tasks tbody tr", has=page.locator("a.task-link", has_text="install.talky"))
    expect(row).to_have_count(1, timeout=LONG)  # planned: the task's page exists
    row.locator("a.task-link").click()  # opened before it runs: its lines arrive on the stream
    own = page.context.new_page()
    own.goto(f"/ui/jobs/{created['job_id']}/tasks/n1000.install.talky")
    expect(own.locator("h1")).to_contain_text("Task n1000.install.talky")
    detail = own.get_by_test_id("task-detail")
    assert "succeeded" not in detail.locator("p").first.inner_text(), "the attempt ended before its page opened"
    own.evaluate("window.sameDocument = true")

    lines = page.get_by_test_id("task-detail").get_by_test_id("attempt-lines")
    expect(lines).to_contain_text("ok: [n1] TASK [install redis]", timeout=LONG)
    expect(lines).to_contain_text("changed: [n1] TASK [configure redis]")
    # Live: the attempt had not ended. The row may still say "planned" or "queued" then: its
    # state comes with the stream's next batch, the lines as they come (1 run in 2 at load 11
    # showed "planned"); the check is that the lines came before the end, not the row's lag.
    assert page.evaluate("window.stateWhenLinesShowed") in ("planned", "queued", "claimed")
    assert page.evaluate("window.sameDocument === true")  # from the stream, without a reload
    expect(page.locator("#timeline")).not_to_contain_text("TASK [install redis]")  # under its task, not in the timeline

    expect(detail.get_by_test_id("attempt-lines")).to_contain_text("changed: [n1] TASK [configure redis]", timeout=LONG)
    expect(detail.locator("p").first).to_contain_text("succeeded", timeout=LONG)
    expect(detail.get_by_test_id("attempt").first.locator("h4")).to_contain_text("succeeded")
    expect(own.get_by_test_id("task-live")).to_have_text("finished: succeeded", timeout=LONG)
    assert own.evaluate("window.sameDocument === true")  # from the stream, without a reload
    expect(page.get_by_test_id("job-state")).to_have_text("succeeded", timeout=LONG)


def test_pages_whose_stream_the_tracker_ends_say_why(muster: Muster, page: Any) -> None:
    """Session 34's walk: a tenant's user's token was revoked while its job page and its cluster
    page were open. The tracker ends their streams with the reason (still.py); the job page said
    only "disconnected; reload the page" (the browser asked again and got a 401), the cluster
    page nothing at all, so it looked live and was not. Both now say the tracker's words."""
    at = ["--tenant", "default", "--data-dir", str(muster.data_dir)]
    name = f"ended-{uuid.uuid4().hex[:6]}"
    token = json.loads(muster.cli("user", "create", name, "--json", *at).stdout)["token"]
    muster.cli("grant", name, "read", "--scope", "cluster:*", *at)
    created = muster.create(f"ended-{uuid.uuid4().hex[:4]}", "talky-small", 1)  # its install runs 15 s
    sign_in(page, token, f"/ui/jobs/{created['job_id']}")
    expect(page.locator("#live-text")).to_have_text("live: updates as they happen")
    cluster = page.context.new_page()
    cluster.goto(f"/ui/clusters/{created['cluster_id']}")
    expect(cluster.get_by_test_id("cluster-ended")).to_be_hidden()

    muster.cli("token", "revoke", token.split("_")[2], "--data-dir", str(muster.data_dir))
    live = page.locator("#live-text")
    expect(live).to_contain_text(f"the stream ends: token {token.split('_')[2]} of {name} was revoked", timeout=LONG)
    expect(live).to_contain_text("reload the page")
    ended = cluster.get_by_test_id("cluster-ended")
    expect(ended).to_contain_text("This page is no longer told of the cluster's changes: the stream ends: ", timeout=LONG)
    expect(ended).to_contain_text("was revoked")
    page.reload()  # the sign-in page says why, its one field ready for the keyboard (it was on nothing)
    expect(page.get_by_role("alert")).to_contain_text("Your token is no longer valid (token ")
    expect(page.get_by_label("Access token")).to_be_focused()
