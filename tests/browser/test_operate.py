"""Operating from the console in a real browser (docs/ui.md, "Operating"): a user with write on
every cluster previews and creates a 3-node cluster and sees it succeed live; a read-only user
sees no forms and is refused when it posts anyway; a preview the catalog moved past is refused
with the reason; bad input is refused at its field with nothing in the log."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from playwright.sync_api import expect

from contracts import subjects
from muster.bus.connect import connect, read_credentials_file

from .conftest import Muster

LONG = 90_000  # ms: a whole job on a simulated cloud, with room for a busy machine
PEOPLE: dict[str, str] = {}


def person(muster: Muster, role: str, permission: str, scope: str) -> str:
    """A user of tenant default with one grant (made once per package run); its token. A writer
    may read the catalog too: the create form lists only the templates its viewer may read."""
    if role not in PEOPLE:
        name = f"{role}-{uuid.uuid4().hex[:6]}"
        made = json.loads(muster.cli("user", "create", name, "--tenant", "default", "--data-dir", str(muster.data_dir), "--json").stdout)
        grants = [(permission, scope)] + ([("read", "catalog:*")] if role == "writer" else [])
        for permission, scope in grants:
            muster.cli("grant", name, permission, "--scope", scope, "--tenant", "default", "--data-dir", str(muster.data_dir))
        PEOPLE[role] = made["token"]
    return PEOPLE[role]


def sign_in(page: Any, token: str, next_path: str = "/ui/clusters") -> None:
    page.context.clear_cookies()
    page.goto(f"/ui/sign-in?next={next_path}")
    page.get_by_label("Access token").fill(token)
    page.get_by_role("button", name="Sign in").click()


def log_of(muster: Muster, tenant: str = "default") -> dict[str, int]:
    """The tenant's events by subject, read with the operator's token (its provisioners' aside)."""
    async def read() -> dict[str, int]:
        nc = await connect(muster.nats, name="browser-test", token=read_credentials_file(muster.data_dir / "credentials"))
        try:
            info = await nc.jetstream().stream_info(subjects.EVENTS_STREAM, subjects_filter=f"{subjects.EVT}.{tenant}.>")
            return {s: n for s, n in (info.state.subjects or {}).items() if ".provisioner." not in s}
        finally:
            await nc.close()

    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API owns this thread's event loop
        return pool.submit(asyncio.run, read()).result(60)


def test_a_writer_previews_and_creates_a_cluster_and_sees_it_succeed_live(muster: Muster, page: Any) -> None:
    sign_in(page, person(muster, "writer", "write", "cluster:*"))
    page.get_by_test_id("new-cluster").click()
    page.get_by_label("Template", exact=True).select_option("mid-small")  # the form is built from the template picked
    expect(page.get_by_label(re.compile("^Nodes"))).to_have_attribute("max", "50")
    page.get_by_label("Name", exact=True).fill("made-here")
    page.get_by_label(re.compile("^Nodes")).fill("3")
    page.get_by_label(re.compile("^Nodes")).press("Enter")  # the keyboard submits the form: Preview
    expect(page.get_by_role("heading", name=re.compile("^Preview: create cluster made-here"))).to_be_visible()
    expect(page.get_by_test_id("preview-layout")).to_contain_text("hdfs-datanode")
    assert int(page.get_by_test_id("preview-tasks").inner_text()) > 20 and int(page.get_by_test_id("preview-stages").inner_text()) > 3
    expect(page.get_by_test_id("estimate-eager")).not_to_be_empty()
    expect(page.get_by_test_id("preview-cost")).to_contain_text("/h once done")  # docs/governance.md
    page.get_by_role("button", name="Create").click()
    expect(page).to_have_url(re.compile(r"/ui/jobs/[0-9a-f-]{36}$"))
    state = page.get_by_test_id("job-state")
    assert state.inner_text() != "succeeded", "the job ended before its page opened: nothing was watched live"
    page.evaluate("window.sameDocument = true")
    expect(page.locator("#control")).to_have_count(0)  # write is not execute: no job control for this user, and why
    expect(page.get_by_test_id("control-why")).to_contain_text("Job control (pause, resume, cancel, retry) needs execute: writer-")
    expect(state).to_have_text("succeeded", timeout=LONG)
    assert page.evaluate("window.sameDocument === true")
    expect(page.locator("#timeline")).to_contain_text("writer")
    page.goto("/ui/clusters")
    page.get_by_role("link", name="made-here").click()  # its changes: those of write, no restart (execute)
    expect(page.get_by_test_id("op-expand")).to_have_count(1)
    expect(page.get_by_test_id("op-restart")).to_have_count(0)
    # Said, not only left out (session 34: no Restart, and no word why).
    expect(page.get_by_test_id("ops-withheld")).to_contain_text("Start services, Stop services, Restart and Check services need execute: writer-")
    expect(page.get_by_test_id("ops-withheld")).to_contain_text("muster grant writer-")


def test_a_keyboard_walks_the_template_list_and_sends_its_pick_with_the_button(muster: Muster, page: Any) -> None:
    """Session 34's walk: the arrow keys on the New cluster page's template list loaded the next
    template's form at the first press and left the focus on nothing, so a keyboard never got
    past the second template. Now a pick from the keyboard shows the button that sends it, and
    the page loaded keeps the focus on the list; a pick with the pointer still loads at once."""
    sign_in(page, person(muster, "writer", "write", "cluster:*"), "/ui/clusters/new")
    pick = page.get_by_label("Template", exact=True)
    names = pick.evaluate("s => [...s.options].map(o => o.value)")
    assert len(names) >= 3, names
    first = pick.input_value()
    use = page.get_by_role("button", name="Use this template")
    expect(use).to_be_hidden()
    pick.focus()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    assert names.index(first) + 2 < len(names), (first, names)  # (the list's first, with two below it)
    third = names[names.index(first) + 2]
    expect(pick).to_have_value(third)  # still this page: each press moved one entry
    assert "template=" not in page.url
    expect(use).to_be_visible()
    page.keyboard.press("Tab")
    expect(use).to_be_focused()
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(f"template={third}$"))
    expect(page.get_by_label("Template", exact=True)).to_be_focused()
    expect(page.get_by_label("Template", exact=True)).to_have_value(third)


def test_a_refusal_that_names_a_command_shows_it_as_code_not_backticks(muster: Muster, page: Any) -> None:
    """Session 34's walk: a repair of a cluster with no drift was refused above the forms with
    "(as last observed: `muster cluster check` looks again)", backticks and all (docs/ui.md: the
    console shows the CLI's and the API's marked commands as code, as its error pages did)."""
    sign_in(page, person(muster, "writer", "write", "cluster:*"))
    page.get_by_role("link", name="made-here").click()
    repair = page.get_by_test_id("op-repair")
    repair.locator("summary").click()
    repair.get_by_role("button", name="Preview").click()
    refused = page.get_by_test_id("form-error")
    expect(refused).to_contain_text("has no drift to repair")
    expect(refused.locator("code")).to_have_text("muster cluster check")
    assert "`" not in refused.inner_text()


def test_a_reader_sees_no_forms_and_is_refused_if_it_posts_anyway(muster: Muster, page: Any) -> None:
    sign_in(page, person(muster, "reader", "read", "tenant"))
    expect(page.get_by_test_id("tenant")).to_have_text("default")
    expect(page.get_by_test_id("new-cluster")).to_have_count(0)
    page.get_by_role("link", name="made-here").click()
    expect(page.get_by_test_id("cluster-name")).to_have_text("made-here")
    expect(page.get_by_test_id("operations").locator("details")).to_have_count(0)  # no form; why, with the grant
    expect(page.get_by_test_id("ops-withheld")).to_contain_text("Expand, Shrink, ")
    expect(page.get_by_test_id("ops-withheld")).to_contain_text(" and Delete need write: reader-")
    expect(page.get_by_test_id("ops-withheld")).to_contain_text("execute --scope cluster:")
    before = log_of(muster)
    csrf = page.locator('meta[name="csrf-token"]').get_attribute("content")
    origin = {"Origin": muster.tracker}
    answer = page.request.post("/ui/clusters/new", headers=origin, form={
        "csrf": csrf, "step": "preview", "template": "hadoop-small", "name": "sneaky", "nodes": "3"})
    assert answer.status == 403 and "may not create clusters" in answer.text()
    assert page.request.get("/ui/clusters/new").status == 403
    assert log_of(muster) == before


def test_a_stale_preview_is_refused_with_the_reason(muster: Muster, page: Any, tmp_path: Any) -> None:
    sign_in(page, person(muster, "writer", "write", "cluster:*"), "/ui/clusters/new?template=hadoop-small")
    page.get_by_label("Name", exact=True).fill("stale-one")
    page.get_by_role("button", name="Preview").click()
    expect(page.get_by_test_id("plan-id")).not_to_be_empty()
    changed = tmp_path / "catalog"  # the catalog moves on while the preview is open
    changed.mkdir()
    service = json.loads((muster.catalog / "services" / "base.json").read_text())
    service["description"] = f"base, changed {uuid.uuid4().hex[:6]}"
    (changed / "services").mkdir()
    (changed / "services" / "base.json").write_text(json.dumps(service))
    muster.cli("catalog", "apply", str(changed), "--tenant", "default", "--data-dir", str(muster.data_dir))
    page.get_by_role("button", name="Create").click()
    expect(page.get_by_test_id("refused")).to_contain_text("the catalog changed since")
    page.get_by_role("button", name="Preview again").click()  # the same request, planned on today's catalog
    expect(page.get_by_role("heading", name=re.compile("^Preview: create cluster stale-one"))).to_be_visible()


def test_bad_input_is_refused_at_its_field_and_nothing_reaches_the_log(muster: Muster, page: Any) -> None:
    page.set_viewport_size({"width": 390, "height": 844})  # a phone: the form reflows, nothing scrolls sideways
    sign_in(page, person(muster, "writer", "write", "cluster:*"), "/ui/clusters/new?template=hadoop-small")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390 + 1, "the form scrolls sideways on a phone"
    before = log_of(muster)
    form = page.get_by_test_id("create-form")
    form.evaluate("f => { f.noValidate = true; }")  # the browser's own checks aside: the server's are tested
    page.get_by_label("Name", exact=True).fill("bad-one")
    page.get_by_label(re.compile("^Nodes")).fill("60")
    page.get_by_role("button", name="Preview").click()
    expect(page.get_by_test_id("error-nodes")).to_contain_text("allows 2 to 50 nodes (its size constraint)")
    expect(page.get_by_label(re.compile("^Nodes"))).to_be_focused()
    # A service the template does not allow (the catalog has `broken`; hadoop-small does not allow it).
    page.get_by_test_id("create-form").evaluate(
        "f => { f.noValidate = true; f.nodes.value = '3'; const c = f.querySelector('.checks');"
        " c.insertAdjacentHTML('beforeend', '<label><input type=checkbox name=services value=broken checked> broken</label>'); }")
    page.get_by_role("button", name="Preview").click()
    expect(page.get_by_test_id("error-services")).to_contain_text("does not allow broken")
    page.get_by_test_id("create-form").evaluate("f => { f.noValidate = true; f.querySelector('input[value=broken]')?.remove(); }")
    page.get_by_label(re.compile("^Config")).fill('{"hdfs": {replication: 2}}')
    page.get_by_role("button", name="Preview").click()
    expect(page.get_by_test_id("error-config")).to_contain_text("not valid JSON")
    assert log_of(muster) == before
    # The cluster page's change forms on the phone; a delete's Preview waits for the cluster's name.
    page.goto("/ui/clusters")
    page.get_by_role("link", name="made-here").click()
    for summary in page.get_by_test_id("operations").locator("summary").all():
        summary.click()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390 + 1, "the change forms scroll sideways on a phone"
    delete = page.get_by_test_id("op-delete")
    preview = delete.get_by_role("button", name="Preview")
    expect(preview).to_be_disabled()
    confirm = delete.get_by_label(re.compile("^Type the cluster's name"))
    confirm.fill("made-her")
    expect(preview).to_be_disabled()
    # Enter with another name typed did nothing visible (session 34): it says so, at the field,
    # and the focus stays there; nothing is sent.
    here = page.url
    confirm.press("Enter")
    expect(delete.get_by_test_id("error-confirm")).to_have_text("'made-her' does not match the cluster's name, made-here: nothing is deleted")
    expect(confirm).to_be_focused()
    expect(confirm).to_have_accessible_description(re.compile("does not match the cluster's name"))
    assert page.url == here and log_of(muster) == before
    confirm.press("e")
    expect(preview).to_be_enabled()
    expect(delete.get_by_test_id("error-confirm")).to_be_hidden()


def test_several_mistakes_are_each_refused_at_their_field_in_one_preview(muster: Muster, page: Any) -> None:
    """Three mistakes took three previews (only the first was said): now each is at its field,
    described to assistive technology, after one Preview; nothing reaches the log."""
    sign_in(page, person(muster, "writer", "write", "cluster:*"), "/ui/clusters/new?template=hadoop-small")
    before = log_of(muster)
    form = page.get_by_test_id("create-form")
    # A stale form: a provider and a hardware type gone from the catalog since it was loaded.
    form.evaluate("f => { f.noValidate = true; f.provider.add(new Option('elsewhere', 'elsewhere', true, true));"
                  " f.hardwaretype.add(new Option('huge', 'huge', true, true)); }")
    page.get_by_label("Name", exact=True).fill("three-wrongs")
    page.get_by_label(re.compile("^Nodes")).fill("60")
    page.get_by_role("button", name="Preview").click()
    expect(page.get_by_test_id("error-nodes")).to_contain_text("allows 2 to 50 nodes (its size constraint)")
    expect(page.get_by_test_id("error-provider")).to_contain_text("unknown provider 'elsewhere'")
    expect(page.get_by_test_id("error-hardwaretype")).to_contain_text("unknown hardware type 'huge'")
    expect(page.get_by_label("Provider")).to_have_accessible_description(re.compile("unknown provider 'elsewhere'"))
    # With a mistake the form finds itself too (a name), the planner's are said with it.
    page.get_by_test_id("create-form").evaluate("f => { f.noValidate = true; }")
    page.get_by_label("Name", exact=True).fill("three wrongs")
    page.get_by_role("button", name="Preview").click()
    expect(page.get_by_test_id("error-name")).to_contain_text("a cluster's name is letters")
    expect(page.get_by_test_id("error-nodes")).to_contain_text("allows 2 to 50 nodes (its size constraint)")
    assert log_of(muster) == before


def test_a_service_whose_requirement_is_not_ticked_is_refused_at_the_services_field(muster: Muster, page: Any) -> None:
    """The solver's refusal of a service that requires one not chosen (create, add-services)
    carried no field: the form said it at its top, away from the boxes to tick. It is said at
    the services, whose ticked box gets the focus; nothing reaches the log."""
    sign_in(page, person(muster, "writer", "write", "cluster:*"), "/ui/clusters/new?template=hadoop-small")
    before = log_of(muster)
    page.get_by_label("Name", exact=True).fill("needs-rm")
    page.get_by_label(re.compile("^Nodes")).fill("3")
    form = page.get_by_test_id("create-form")
    for box in form.locator("input[name=services]").all():
        box.set_checked(box.get_attribute("value") in ("base", "yarn-nodemanager"))
    page.get_by_role("button", name="Preview").click()
    expect(page.get_by_test_id("error-services")).to_contain_text(
        "yarn-nodemanager requires yarn-resourcemanager, which no service on the cluster is or provides")
    expect(page.get_by_test_id("form-error")).to_have_count(0)
    expect(form.locator("input[name=services][value=base]")).to_be_focused()
    expect(form.locator("input[name=services][value=yarn-nodemanager]")).to_be_checked()  # as it was ticked
    assert log_of(muster) == before
    # A cluster without yarn, where yarn-nodemanager alone is added.
    muster.cli("cluster", "create", "no-yarn", "-t", "hadoop-small", "-n", "2", "--services", "base,zookeeper-server",
               "--tenant", "default", "--data-dir", str(muster.data_dir), "--wait")
    page.goto("/ui/clusters")
    page.get_by_role("link", name="no-yarn").click()
    add = page.get_by_test_id("op-add-services")
    add.locator("summary").click()
    add.get_by_label("yarn-nodemanager").check()
    add.get_by_role("button", name="Preview").click()
    add = page.get_by_test_id("op-add-services")
    expect(add.get_by_test_id("error-services")).to_contain_text("yarn-nodemanager requires yarn-resourcemanager")
    expect(page.get_by_test_id("form-error")).to_have_count(0)
    expect(add.get_by_label("yarn-nodemanager")).to_be_focused()


def test_an_operator_stops_a_service_on_one_node_from_the_cluster_page_after_a_preview(muster: Muster, page: Any) -> None:
    """The console could not start, stop, check or repair (the CLI can: `muster cluster stop c1
    SERVICE --nodes n1000`; a new user's walk, session 20). Each is a change form now, previewed
    first; they take `execute` (repair `write`), so a user with `execute` alone gets them and no other."""
    made = muster.create("stop-here", "hadoop-small", 2)
    sign_in(page, person(muster, "operator", "execute", "cluster:*"))
    page.goto(f"/ui/jobs/{made['job_id']}")
    expect(page.get_by_test_id("job-state")).to_have_text("succeeded", timeout=LONG)
    page.goto(f"/ui/clusters/{made['cluster_id']}")
    offered = page.get_by_test_id("operations").locator("details").evaluate_all("ds => ds.map(d => d.dataset.testid)")
    assert offered == ["op-start", "op-stop", "op-restart", "op-check"], offered
    stop = page.get_by_test_id("op-stop")
    stop.locator("summary").click()
    stop.get_by_label("zookeeper-server").check()
    stop.get_by_label(re.compile("^On nodes")).fill("n1000")
    stop.get_by_role("button", name="Preview").click()
    expect(page.get_by_role("heading", name=re.compile("^Preview: stop services cluster stop-here"))).to_be_visible()
    expect(page.locator("main")).to_contain_text("stop")
    # Change: back to the form as it was typed, open, with the focus on its first field (it was
    # left at the page's top, the form far below: session 34), then previewed again.
    page.get_by_role("button", name="Change").click()
    stop = page.get_by_test_id("op-stop")
    expect(stop.get_by_label("zookeeper-server")).to_be_checked()
    expect(stop.get_by_label(re.compile("^On nodes"))).to_have_value("n1000")
    expect(stop.locator("input[type=checkbox]").first).to_be_focused()
    stop.get_by_role("button", name="Preview").click()
    page.get_by_role("button", name="Apply").click()
    expect(page).to_have_url(re.compile(r"/ui/jobs/[0-9a-f-]{36}$"))
    expect(page.get_by_test_id("job-state")).to_have_text("succeeded", timeout=LONG)
    page.goto(f"/ui/clusters/{made['cluster_id']}")
    expect(page.get_by_test_id("node-states").first).to_contain_text("zookeeper-server: stopped")


def test_a_cluster_whose_job_waits_for_an_approver_says_it_is_busy_above_its_change_forms(muster: Muster, page: Any) -> None:
    """A delete waiting for approval leaves its cluster `active`: the change forms were offered as
    if nothing waited, and the apply after a preview was refused as busy (session 20's walk)."""
    data = ["--tenant", "default", "--data-dir", str(muster.data_dir)]
    muster.cli("rule", "add", "waits-expands", "-o", "expand", "--cluster", "waits-*", *data)
    try:
        made = muster.create("waits-here", "tiny-small", 1)
        sign_in(page, person(muster, "writer", "write", "cluster:*"))
        page.goto(f"/ui/jobs/{made['job_id']}")
        expect(page.get_by_test_id("job-state")).to_have_text("succeeded", timeout=LONG)
        asked = json.loads(muster.cli("cluster", "expand", "waits-here", "--nodes", "2", "--json", *data).stdout.splitlines()[0])
        page.goto(f"/ui/clusters/{made['cluster_id']}")
        busy = page.get_by_test_id("ops-busy")
        expect(busy).to_contain_text(f"busy with its expand job {asked['job_id'][:8]}, waiting for approval")
        muster.cli("job", "reject", asked["job_id"], "--comment", "a test", *data)
        page.reload()
        expect(page.get_by_test_id("ops-busy")).to_have_count(0)
    finally:
        muster.cli("rule", "delete", "waits-expands", *data)


def test_an_expands_preview_says_what_it_does_to_each_hardware_types_cost_as_its_reader_may_read_it(muster: Muster,
                                                                                                        page: Any) -> None:
    """An expand's preview says each type whose cost it moves, before -> once done (docs/governance.md,
    "Cost in the preview"); a reader without read on the type is shown no price for it, never a figure."""
    made = muster.create("priced-here", "tiny-small", 1)  # one small node, 0.05/h in the demo catalog
    sign_in(page, person(muster, "writer", "write", "cluster:*"))
    page.goto(f"/ui/jobs/{made['job_id']}")
    expect(page.get_by_test_id("job-state")).to_have_text("succeeded", timeout=LONG)

    def preview(token: str) -> None:
        sign_in(page, token, f"/ui/clusters/{made['cluster_id']}")
        expand = page.get_by_test_id("op-expand")
        expand.locator("summary").click()
        expand.get_by_label(re.compile("^New total of nodes")).fill("3")
        expand.get_by_role("button", name="Preview").click()
        expect(page.get_by_role("heading", name=re.compile("^Preview: expand"))).to_be_visible()

    preview(person(muster, "writer", "write", "cluster:*"))
    expect(page.get_by_test_id("preview-cost-change")).to_have_text(["small 0.05/h → 0.15/h"])
    preview(person(muster, "blind", "write", "cluster:*"))  # reads no hardware type
    expect(page.get_by_test_id("preview-cost")).to_contain_text("small 3 × no price")
    expect(page.get_by_test_id("preview-cost-change")).to_have_count(0)
    assert "0.15" not in page.get_by_test_id("preview-cost").inner_text()
