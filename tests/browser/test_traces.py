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
POST_APPLY = "POST /ui/plans/{plan_id}/apply"  # the tracker names a write's span by its route
PREVIEW = "POST /ui/clusters/new"
SECRETISH = re.compile(r"token|secret|password|authorization|cookie|csrf", re.I)


def traced_with(pick: Callable[[Received], bool], *names: str) -> Callable[[list[Received]], bool]:
    """True once a span `pick` takes came, and a span of each of `names` in its trace (spans of
    other processes, each sent on its own schedule)."""
    def found(spans: list[Received]) -> bool:
        anchor = next((s for s in spans if pick(s)), None)
        return anchor is not None and set(names) <= {s.name for s in spans if s.trace_id == anchor.trace_id}
    return found


def job_done(job_id: str, *names: str) -> Callable[[list[Received]], bool]:
    """True once the job's span came (the planner makes it at the job's end, after its tasks'
    spans), a provisioner's `run` span for every task the job's span holds, and `names`."""
    def is_job(s: Received) -> bool:
        return s.name.startswith("job ") and s.attributes.get("muster.job") == job_id

    def found(spans: list[Received]) -> bool:
        if not traced_with(is_job, *names)(spans):
            return False
        job = next(s for s in spans if is_job(s))
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
    spans = muster.traces.until(job_done(job_id, "solve"), WAIT_S)
    trace, up = one_trace(spans, job_id)
    assert up == ["muster-planner: job create", "muster-planner: request create", "muster-cli: muster create"]
    # Solved through the log under the job's span, or at admission under the request's when the
    # tenant has governance rules (test_governance_page.py adds one): over request/reply.
    solve = next(s for s in trace if s.name == "solve")
    assert solve.service == "muster-solver" and solve.parent in {s.span_id for s in trace if s.name in ("job create", "request create")}
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
    plan_id = page.locator("form[action^='/ui/plans/']").get_attribute("action").split("/")[3]
    page.get_by_role("button", name="Create").click()
    expect(page).to_have_url(re.compile(r"/ui/jobs/[0-9a-f-]{36}$"))
    job_id = page.url.rsplit("/", 1)[1]
    spans = muster.traces.until(job_done(job_id, POST_APPLY), WAIT_S)
    trace, up = one_trace(spans, job_id)
    # The tracker's span of the POST is the root; its client span asked the planner (which
    # runs the plan the preview solved: no solver in this trace).
    assert up == ["muster-planner: job create", "muster-planner: request apply", "muster-tracker: muster apply",
                  f"muster-tracker: {POST_APPLY}"], up
    post = next(s for s in trace if s.name.startswith("POST "))
    assert (post.attributes["http.request.method"], post.attributes["http.response.status_code"]) == ("POST", 303)
    # The job's page links to this trace in the tracing UI.
    expect(page.get_by_test_id("trace-link")).to_have_attribute("href", TRACE_URL.format(trace_id=post.trace_id))
    # The preview was a trace of its own: a dry run, solved over request/reply under the
    # planner's request, which names the plan it saved.
    def is_preview(s: Received) -> bool:
        return s.name == "request create" and s.attributes.get("muster.plan") == plan_id

    spans = muster.traces.until(traced_with(is_preview, "solve", PREVIEW), WAIT_S)
    by_id = {s.span_id: s for s in spans}
    request = next(s for s in spans if is_preview(s))
    solve = next(s for s in spans if s.name == "solve" and s.trace_id == request.trace_id)
    client = by_id[request.parent]
    assert (solve.service, solve.parent, client.name, by_id[client.parent].name, by_id[client.parent].parent) == (
        "muster-solver", request.span_id, "muster create", PREVIEW, "")
    no_secret(spans, [read_credentials_file(muster.data_dir / "credentials"), form_token])
