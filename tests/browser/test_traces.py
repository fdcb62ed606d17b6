"""Traces end to end (docs/tracing.md) from the two places a person starts an operation: a real
`muster cluster create --wait` process, and a console form posted by chromium. The package's
`muster up` exports every service's spans over OTLP/HTTP to the test's receiver
(conftest.traced); each operation's spans, from the command's or the POST's root span through
the planner (and the solver, for a create) and the provisioners, must be one trace with every
parent link known, and hold no token."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from playwright.sync_api import expect

from muster.bus.connect import read_credentials_file
from services.tracker import csrf

from .conftest import TRACE_URL, Muster, Received, traced

WAIT_S = 30  # spans leave each process a fifth of a second after they end; room for a busy machine
SECRETISH = re.compile(r"token|secret|password|authorization|cookie|csrf", re.I)


def job_done(job_id: str) -> Callable[[list[Received]], bool]:
    """True once the job's span came (the planner makes it at the job's end, after its tasks'
    spans) and a provisioner's `run` span came for every task the job's span holds."""
    def found(spans: list[Received]) -> bool:
        job = next((s for s in spans if s.name.startswith("job ") and s.attributes.get("muster.job") == job_id), None)
        if job is None:
            return False
        tasks = {s.attributes.get("muster.task") for s in spans if s.name.startswith("task ") and s.parent == job.span_id}
        ran = {s.attributes.get("muster.task") for s in spans if s.name.startswith("run ") and s.attributes.get("muster.job") == job_id}
        return bool(tasks) and tasks <= ran
    return found


def one_trace(spans: list[Received], job_id: str) -> tuple[list[Received], list[str]]:
    """The job's trace, and the names (with the service that made each) from the job's span up
    to its root: every parent on the way must have come."""
    job = next(s for s in spans if s.name.startswith("job ") and s.attributes.get("muster.job") == job_id)
    trace = [s for s in spans if s.trace_id == job.trace_id]
    by_id = {s.span_id: s for s in trace}
    assert len(by_id) == len(trace), "a span came twice"
    up, span = [f"{job.service}: {job.name}"], job
    while span.parent:
        assert span.parent in by_id, f"{span.name}'s parent {span.parent} is not in the trace"
        span = by_id[span.parent]
        up.append(f"{span.service}: {span.name}")
    # Every task attempt is the job's child, its claim and run the provisioner's, under it.
    tasks = {s.span_id: s for s in trace if s.name.startswith("task ")}
    assert tasks and all(t.parent == job.span_id and t.service == "muster-planner" for t in tasks.values())
    for kind in ("claim", "run"):
        made = [s for s in trace if s.name.split(" ")[0] == kind]
        assert len(made) == len(tasks) and all(s.parent in tasks and s.service == "muster-provisioner" for s in made), kind
    return trace, up


def no_secret(spans: list[Received], secrets: list[str]) -> None:
    for s in spans:
        for key, value in s.attributes.items():
            assert not SECRETISH.search(key), (s.name, key)
            assert not any(secret in str(value) for secret in secrets), (s.name, key)


def test_a_command_is_one_trace_from_its_own_span_to_the_provisioners(muster: Muster) -> None:
    done = muster.cli("cluster", "create", "traced-cli", "-t", "tiny-small", "-n", "1", "--data-dir", str(muster.data_dir),
                      "--json", "--wait", env=traced(muster.traces.url))
    job_id = json.loads(done.stdout.splitlines()[0])["job_id"]
    spans = muster.traces.until(job_done(job_id), WAIT_S)
    trace, up = one_trace(spans, job_id)
    assert up == ["muster-planner: job create", "muster-planner: request create", "muster-cli: muster create"]
    assert next(s for s in trace if s.name == "solve").parent == next(s for s in trace if s.name == "job create").span_id
    [command] = [s for s in trace if s.service == "muster-cli"]  # the command's span is the trace's root
    assert (command.parent, command.attributes["muster.job"], command.attributes["muster.answer"]) == ("", job_id, "Accepted")
    no_secret(spans, [read_credentials_file(muster.data_dir / "credentials")])


def test_a_console_form_is_one_trace_from_its_post_to_the_provisioners(muster: Muster, page: Any) -> None:
    page.goto("/ui/clusters/new")
    page.get_by_label("Template", exact=True).select_option("tiny-small")
    page.get_by_label("Name", exact=True).fill("traced-form")
    page.get_by_label(re.compile("^Nodes")).fill("1")
    page.get_by_role("button", name="Preview").click()
    expect(page.get_by_role("heading", name=re.compile("^Preview: create cluster traced-form"))).to_be_visible()
    form_token = page.locator(f"input[name={csrf.FIELD}]").first.input_value()
    page.get_by_role("button", name="Create").click()
    expect(page).to_have_url(re.compile(r"/ui/jobs/[0-9a-f-]{36}$"))
    job_id = page.url.rsplit("/", 1)[1]
    spans = muster.traces.until(job_done(job_id), WAIT_S)
    trace, up = one_trace(spans, job_id)
    # The tracker's span of the POST is the root; its client span asked the planner (which
    # applies the layout the preview solved: no solver in this trace).
    assert up == ["muster-planner: job create", "muster-planner: request apply", "muster-tracker: muster apply",
                  "muster-tracker: POST /ui/plans/{plan_id}/apply"], up
    post = next(s for s in trace if s.name.startswith("POST "))
    assert (post.attributes["http.request.method"], post.attributes["http.response.status_code"]) == ("POST", 303)
    # The job's page links to this trace in the tracing UI.
    expect(page.get_by_test_id("trace-link")).to_have_attribute("href", TRACE_URL.format(trace_id=post.trace_id))
    no_secret(spans, [read_credentials_file(muster.data_dir / "credentials"), form_token])
