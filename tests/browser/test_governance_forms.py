"""The governance page's forms in a real browser (conftest.py; session 37): a tenant admin makes
an approval rule, a Rego policy, a webhook subscription (and tests it: the package's receiver
checks its signature) and a schedule (its next runs previewed first) from the console, and sees
each listed; bad Rego, a bad cron and a refused URL are said at their fields and store nothing;
a user without the grants sees no form and its forged post is refused by the service; another
tenant sees none of it. Until then the page listed them and a tenant admin made them with the
CLI or a raw PUT (docs/ui.md, docs/governance.md)."""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from playwright.sync_api import expect

from services.notifier.domain.signing import DELIVERY, SIGNATURE, verify

from .conftest import HOOK_SECRET, Muster, hook_secret
from .test_operate import person, sign_in


class Receiver(BaseHTTPRequestHandler):
    got: list[tuple[dict[str, str], bytes]] = []
    arrived = threading.Event()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        Receiver.got.append(({k.lower(): v for k, v in self.headers.items()}, body))
        Receiver.arrived.set()
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[str]:
    """A webhook receiver on loopback (tenant default's webhooks may post there: conftest.notifier_files)."""
    Receiver.got, Receiver.arrived = [], threading.Event()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()
        server.server_close()


def admin(muster: Muster) -> str:
    name = f"adm-{uuid.uuid4().hex[:6]}"
    out = muster.cli("user", "create", name, "--tenant", "default", "--role", "tenant_admin", "--json", "--data-dir", str(muster.data_dir))
    return str(json.loads(out.stdout)["token"])


def listed(muster: Muster, what: str) -> list[str]:
    """The names `muster <what> list --json` has (the log's word, not the page's)."""
    out = muster.cli(what, "list", "--json", "--data-dir", str(muster.data_dir))
    return [i["name"] for i in json.loads(out.stdout.splitlines()[0])["items"]]


def test_a_tenant_admin_makes_each_kind_from_the_page_and_bad_ones_are_refused_at_their_field(
        muster: Muster, page: Any, receiver: str) -> None:
    muster.create("govform-c", "tiny-small", 1)
    sign_in(page, admin(muster), "/ui/governance")

    # An approval rule.
    page.get_by_test_id("new-rules").click()
    page.locator("#f-name").fill("form-rule")
    page.get_by_label("delete", exact=True).check()
    page.locator("#f-clusters").fill("govform-*")
    page.locator("#f-expires").fill("2h")
    page.get_by_test_id("save").click()
    expect(page.get_by_test_id("governance-said")).to_have_text("rule form-rule added (version 1)")
    expect(page.locator("#rule-form-rule")).to_contain_text("govform-*")
    expect(page.locator("#rule-form-rule")).to_contain_text("2 h")

    # A policy that does not pass `policy apply`'s checks: said at the Rego with its line, nothing stored.
    page.get_by_test_id("new-policies").click()
    page.locator("#f-name").fill("form-policy")
    page.locator("#f-source").fill('package muster.lim\nimport rego.v1\n\ndeny contains "too big" if {\n  input.nodes.after > limit\n}\n')
    page.get_by_test_id("save").click()
    expect(page.get_by_test_id("error-source")).to_contain_text("(line 5) reads limit, which no rule")
    expect(page.locator("#f-source")).to_be_focused()
    expect(page.locator("#f-source")).to_have_value(
        'package muster.lim\nimport rego.v1\n\ndeny contains "too big" if {\n  input.nodes.after > limit\n}\n')
    assert "form-policy" not in listed(muster, "policy")
    page.locator("#f-source").fill('package muster.lim\nimport rego.v1\n\ndeny contains "too big" if {\n  input.nodes.after > 40\n}\n')
    page.get_by_test_id("save").click()
    expect(page.get_by_test_id("governance-said")).to_have_text("policy form-policy added (version 1)")
    expect(page.locator("#policy-form-policy")).to_contain_text("form-policy version 1")

    # A signing secret typed in clear: refused at its field, and never repeated (page, logs).
    page.get_by_test_id("new-subscriptions").click()
    page.locator("#f-name").fill("form-bad")
    page.get_by_label("job_failed").check()
    page.locator("#f-url").fill(receiver)
    clear = f"typed-in-clear-{uuid.uuid4().hex}"
    page.locator("#f-secret").fill(clear)
    page.get_by_test_id("save").click()
    expect(page.get_by_test_id("error-secret")).to_contain_text("give a reference, secret://NAME")
    expect(page.locator("#f-secret")).to_be_focused()
    expect(page.locator("#f-secret")).to_have_value("")
    assert clear not in page.content()
    logs = [p for p in (muster.data_dir / "logs").rglob("*") if p.is_file()]
    assert any(p.name.startswith("tracker") for p in logs), logs  # (the tracker's own among them)
    assert not any(clear in p.read_text(errors="replace") for p in logs)
    # A webhook whose URL the notifier's rule refuses: at the URL, nothing stored.
    page.locator("#f-url").fill("http://10.0.0.5/hook")
    page.locator("#f-secret").fill(f"secret://{HOOK_SECRET}")
    page.get_by_test_id("save").click()
    expect(page.get_by_test_id("error-url")).to_contain_text("10.0.0.5 is a private address")
    expect(page.locator("#f-secret")).to_have_value("")  # (never given back)
    assert "form-bad" not in listed(muster, "notify")
    # One it takes, then its Test: delivered to the receiver, signed with the secret the page never shows.
    page.locator("#f-name").fill("form-hook")
    page.locator("#f-url").fill(receiver)
    page.locator("#f-secret").fill(f"secret://{HOOK_SECRET}")
    page.get_by_test_id("save").click()
    expect(page.get_by_test_id("governance-said")).to_have_text("subscription form-hook added (version 1)")
    expect(page.locator("#subscription-form-hook")).to_contain_text(receiver)
    page.get_by_test_id("test-made").get_by_role("button", name="Test it now").click()
    expect(page.get_by_test_id("governance-said")).to_have_text("test notification delivered to form-hook (HTTP 200)")
    assert Receiver.arrived.wait(10) and len(Receiver.got) == 1
    headers, body = Receiver.got[0]
    verify(hook_secret(muster), body, headers[SIGNATURE.lower()], headers[DELIVERY.lower()], time.time(), set())
    page.goto("/ui/governance/subscriptions/form-hook/edit")
    assert hook_secret(muster).decode() not in page.content() and f"secret://{HOOK_SECRET}" not in page.content()
    expect(page.locator("#f-secret")).to_have_value("")
    page.get_by_label("job_succeeded").check()
    page.get_by_test_id("save").click()  # the secret left empty: the one it has is kept
    expect(page.get_by_test_id("governance-said")).to_have_text("subscription form-hook changed (version 2)")
    out = muster.cli("notify", "list", "--json", "--data-dir", str(muster.data_dir))
    hook = next(i for i in json.loads(out.stdout.splitlines()[0])["items"] if i["name"] == "form-hook")
    assert hook["entity"]["webhook"]["secret"] == f"secret://{HOOK_SECRET}" and "job_succeeded" in hook["entity"]["events"], hook

    # A schedule: a bad cron at its field, a preview of its next runs (nothing stored), then made.
    page.goto("/ui/governance")
    page.get_by_test_id("new-schedules").click()
    page.locator("#f-name").fill("form-nightly")
    page.locator("#f-cluster").select_option(label="govform-c")
    page.locator("#f-operation").select_option("check")
    page.locator("#f-cron").fill("0 25 * * *")
    page.get_by_test_id("save").click()
    expect(page.get_by_test_id("error-cron")).to_contain_text("cron '0 25 * * *'")
    expect(page.locator("#f-cron")).to_be_focused()
    page.locator("#f-cron").fill("0 3 * * *")
    page.get_by_test_id("preview").click()
    expect(page.get_by_test_id("preview-operation")).to_have_text("cluster check govform-c")
    expect(page.get_by_test_id("preview-runs").locator("li")).to_have_count(5)
    expect(page.get_by_test_id("preview-runs").locator("time").first).to_have_attribute("datetime", re.compile(r"T03:00:00\+00:00$"))
    assert "form-nightly" not in listed(muster, "schedule")
    page.get_by_test_id("save").click()
    expect(page.get_by_test_id("governance-said")).to_have_text("schedule form-nightly added (version 1)")
    row = page.locator("#schedule-form-nightly")
    expect(row).to_contain_text("cluster check govform-c")
    expect(row.get_by_test_id("next-run")).not_to_have_text("–")
    for what, name in (("rule", "form-rule"), ("policy", "form-policy"), ("notify", "form-hook"), ("schedule", "form-nightly")):
        muster.cli(what, "remove" if what == "notify" else "delete", name, "--data-dir", str(muster.data_dir))


def test_who_may_not_sees_no_form_its_forged_post_is_refused_and_another_tenant_sees_none(muster: Muster, page: Any) -> None:
    at = ["--data-dir", str(muster.data_dir)]
    muster.cli("rule", "add", "form-ours", "-o", "delete", "--expires", "1h", *at)
    try:
        sign_in(page, person(muster, "clusterreader", "read", "cluster:*"), "/ui/governance")  # may read clusters, make nothing
        expect(page.locator("h1")).to_have_text("Governance")
        for what in ("schedules", "rules", "policies", "subscriptions"):
            expect(page.get_by_test_id(f"new-{what}")).to_have_count(0)
        csrf = page.locator('meta[name="csrf-token"]').get_attribute("content")
        answer = page.request.post("/ui/governance/rules/save", form={"csrf": str(csrf), "name": "form-forged", "operations": "create"},
                                   headers={"Origin": muster.tracker})
        assert answer.status == 403 and "not written: " in answer.text(), answer.text()
        assert page.request.get("/ui/governance/rules/new").status == 403
        assert "form-forged" not in listed(muster, "rule")

        muster.cli("tenant", "create", "other", *at, check=False)  # (test_console.py makes it too)
        name = f"oth-{uuid.uuid4().hex[:6]}"
        out = muster.cli("user", "create", name, "--tenant", "other", "--role", "tenant_admin", "--json", *at)
        sign_in(page, json.loads(out.stdout)["token"], "/ui/governance")
        expect(page.get_by_test_id("new-rules")).to_be_visible()  # its own tenant's forms
        expect(page.locator("#rule-form-ours")).to_have_count(0)
        assert page.request.get("/ui/governance/rules/form-ours/edit").status == 404
    finally:
        muster.cli("rule", "delete", "form-ours", *at)
