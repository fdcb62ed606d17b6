"""Governance in the planner, on in-memory fakes: policies deny with their message (recorded) or
warn; a request an approval rule matches is accepted at once and waits with its plan; it runs
exactly that plan once approved, is refused if the cluster changed, ends when rejected or when
nobody approved in time; the requester cannot approve its own job unless a rule allows it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from planner_harness import Harness, fails_creates, identities

from contracts import subjects
from contracts.commands import (
    Accepted,
    ApproveJob,
    CreateCluster,
    DeleteCluster,
    DryRun,
    ExpandCluster,
    ExtendLease,
    Rejected,
    RejectJob,
)
from contracts.governance import GovernanceDeleted, GovernancePut
from contracts.identity import PermissionGranted, PrincipalCreated, Scope
from muster.ports.eventlog import Append
from muster.readmodel.timeline import describe
from services.planner.config import PlannerConfig
from services.planner.replies import Replies

READS_TEMPLATES = ("builder", "read", Scope(tenant="default", kind="catalog", id="*"))
"""A create names a template its requester may read."""

NODES = """package muster.nodes
import rego.v1

deny contains msg if {
    input.request.nodes > 10
    msg := sprintf("at most 10 nodes per cluster; %d asked", [input.request.nodes])
}

warn contains "more than 3 nodes" if input.nodes.after > 3
"""


async def put(h: Harness, kind: str, name: str, **entity: Any) -> None:
    subject = subjects.governance_events("default", kind, name)
    await h.log.append(subject, [Append(GovernancePut(kind=kind, name=name, entity={"name": name, **entity}, version=1,  # type: ignore[arg-type]
                                                      by="ada"), msg_id=f"{subject}:1")])


async def test_a_refusal_says_which_policy_denied_it_in_words_even_without_a_message() -> None:
    """Walk of session 22: `expand rejected: expand denied by the tenant's policies: denied (the
    policy gives no message) (policy quiet)`: denied twice over, and nothing a user could act on."""
    h = Harness()
    await put(h, "policy", "quiet", source="package muster.quiet\nimport rego.v1\n\ndeny if input.request.nodes > 10\n")
    big = await h.send(CreateCluster(name="big", template="hadoop-small", nodes=50, request_id="big"), principal="uma")
    assert isinstance(big, Rejected) and big.code == "forbidden", big
    assert big.reason == ("the tenant's policies deny it: a deny rule holds that gives no message (a tenant admin reads the "
                          "policy with muster policy list --source) (policy quiet)"), big.reason
    assert "denied" not in big.reason


async def test_a_policy_denies_a_50_node_create_with_its_message_and_allows_a_5_node_one() -> None:
    h = Harness()
    await put(h, "policy", "nodes", source=NODES)
    big = await h.send(CreateCluster(name="big", template="hadoop-small", nodes=50, request_id="big"), principal="uma")
    assert isinstance(big, Rejected) and "at most 10 nodes per cluster; 50 asked (policy nodes)" in big.reason
    denied = [r.event for r in h.log.records if r.type == "RequestDenied"]
    assert len(denied) == 1 and denied[0].by == "uma" and denied[0].denials[0].policy == "nodes"
    assert not [r for r in h.log.records if r.type == "ClusterRequested"]  # nothing else recorded, the name free
    small = await h.send(CreateCluster(name="big", template="hadoop-small", nodes=5, request_id="small"), principal="uma")
    assert isinstance(small, Accepted) and small.warnings[0] == "more than 3 nodes (policy nodes)"
    await h.settle()
    assert h.job(small.job_id).state == "succeeded" and h.events(small.job_id, "PolicyWarned")[0].warnings[0].policy == "nodes"


async def test_a_dry_run_shows_the_cost_and_what_governance_would_say() -> None:
    h = Harness()
    await put(h, "policy", "nodes", source=NODES)
    await put(h, "rule", "big", min_nodes=4)
    reply = await h.send(CreateCluster(name="x", template="hadoop-small", nodes=5, dry_run=True))
    assert isinstance(reply, DryRun) and reply.cost is not None and reply.policy is not None
    assert reply.cost["per_hour"] >= 0 and len(reply.cost["per_node"]) == 5
    shown = dict(reply.policy)
    given = shown.pop("input")  # what the policies were evaluated on: `muster policy test --input` takes it
    assert shown == {"deny": [], "warn": ["more than 3 nodes (policy nodes)"], "approval": ["big"]}
    assert given["nodes"] == {"before": 0, "after": 5} and given["request"]["nodes"] == 5 and given["cost"]["per_hour"] >= 0


CEILING = """package muster.ceiling
import rego.v1

deny contains "over 2 nodes" if input.nodes.after > 2
deny contains "over 0.01/h" if input.cost.per_hour > 0.01
"""


async def test_a_delete_leaves_no_nodes_and_no_cost_so_a_ceiling_never_refuses_it() -> None:
    h = Harness()
    cluster_id = await h.cluster_of(nodes=3)
    await put(h, "policy", "ceiling", source=CEILING)
    preview = await h.send(DeleteCluster(cluster_id=cluster_id, dry_run=True))
    assert isinstance(preview, DryRun) and preview.policy is not None and preview.cost is not None
    assert preview.policy["deny"] == [] and preview.policy["input"]["nodes"] == {"before": 3, "after": 0}
    assert preview.cost["per_hour"] == 0 and preview.cost["per_node"] == {}
    assert isinstance(await h.send(DeleteCluster(cluster_id=cluster_id)), Accepted)


async def test_policies_see_the_requesters_role() -> None:
    h = Harness(identities=identities(("builder", "write", Scope(tenant="default", kind="cluster", id="*")), READS_TEMPLATES))
    await put(h, "policy", "admins", source='package muster.admins\nimport rego.v1\n\n'
              'deny contains "only administrators create more than 3 nodes" if {\n'
              '    input.request.nodes > 3\n    not input.requester.role in {"tenant_admin", "super_admin"}\n}\n')
    refused = await h.send(CreateCluster(name="w", template="hadoop-small", nodes=5), principal="builder")
    assert isinstance(refused, Rejected) and "only administrators" in refused.reason, refused
    assert isinstance(await h.send(CreateCluster(name="w", template="hadoop-small", nodes=5), principal="root"), Accepted)
    # The dry run judges the requester the subject names, as the request itself is judged (not the body's requested_by).
    preview = await h.send(CreateCluster(name="v", template="hadoop-small", nodes=5, dry_run=True, requested_by="root"),
                           principal="builder")
    assert isinstance(preview, DryRun) and preview.policy is not None
    assert preview.policy["input"]["requester"] == {"id": "builder", "role": "user"} and preview.policy["deny"], preview.policy
    # And the request a policy reads names the caller too, not what the client wrote in its body
    # (the CLI writes the OS user there).
    assert preview.policy["input"]["request"]["requested_by"] == "builder", preview.policy["input"]["request"]
    made = await h.send(CreateCluster(name="u", template="hadoop-small", nodes=2, requested_by="root"), principal="builder")
    assert isinstance(made, Accepted)
    await h.settle()
    assert h.job(made.job_id).requested_by == "builder"


async def approval_pending(h: Harness, allow_self: bool = False) -> tuple[str, str]:
    cluster_id = await h.cluster_of(nodes=3)
    await put(h, "rule", "deletes", operations=["delete"], allow_self_approval=allow_self, expires_after_s=600)
    reply = await h.send(DeleteCluster(cluster_id=cluster_id, request_id="del"), principal="uma")
    assert isinstance(reply, Accepted) and "waits for approval" in reply.warnings[0]
    # The commands that decide it, whole with the job's id (walk of session 27: the id was left out).
    assert f"`muster job approve {reply.job_id}` or `muster job reject {reply.job_id}`" in reply.warnings[0], reply.warnings
    await h.settle()
    job = h.job(reply.job_id)
    assert job.view()["state"] == "waiting_for_approval" and job.planned and h.queue.take() == []
    return reply.job_id, cluster_id


async def test_a_matching_request_waits_with_its_plan_and_runs_it_once_approved() -> None:
    h = Harness()
    job_id, cluster_id = await approval_pending(h)
    own = await h.send(ApproveJob(job_id=job_id), principal="uma")
    assert isinstance(own, Rejected) and "may not approve" in own.reason
    ok = await h.send(ApproveJob(job_id=job_id, comment="looked at it"), principal="apo")
    assert isinstance(ok, Accepted), ok
    await h.settle()
    assert h.job(job_id).state == "succeeded" and h.cluster(cluster_id).status == "deleted"
    approved = h.events(job_id, "JobApproved")[0]
    assert (approved.by, approved.comment) == ("apo", "looked at it")
    story = [describe(r.event) for r in h.job_records(job_id)]
    assert "approved by apo: looked at it" in story and any(line.startswith("waits for approval (rules deletes)") for line in story)
    again = await h.send(ApproveJob(job_id=job_id), principal="apo")
    assert isinstance(again, Rejected)


async def test_a_change_refused_while_a_job_waits_for_approval_says_it_waits_not_that_it_runs() -> None:
    h = Harness()
    job_id, cluster_id = await approval_pending(h)
    busy = await h.send(ExpandCluster(cluster_id=cluster_id, nodes=4))
    assert isinstance(busy, Rejected) and f"busy with job {job_id} (delete, waiting_for_approval)" in busy.reason, busy


async def test_self_approval_when_every_matching_rule_allows_it() -> None:
    h = Harness()
    job_id, _ = await approval_pending(h, allow_self=True)
    assert isinstance(await h.send(ApproveJob(job_id=job_id), principal="uma"), Accepted)


async def test_a_rejected_job_ends_and_cannot_be_retried_into_running() -> None:
    h = Harness()
    job_id, cluster_id = await approval_pending(h)
    assert isinstance(await h.send(RejectJob(job_id=job_id, comment="not now"), principal="apo"), Accepted)
    await h.settle()
    assert h.job(job_id).state == "failed" and "rejected by apo: not now" in h.job(job_id).error
    assert h.cluster(cluster_id).status == "active" and h.queue.take() == []
    from contracts.commands import RetryJob

    assert isinstance(await h.send(RetryJob(job_id=job_id), principal="ada"), Rejected)


async def test_the_approved_plan_is_refused_when_the_cluster_changed_meanwhile() -> None:
    h = Harness()
    job_id, cluster_id = await approval_pending(h)
    extended = await h.send(ExtendLease(cluster_id=cluster_id, by_s=60), principal="ada")
    if isinstance(extended, Rejected):  # the demo template may have no lease: change the cluster another way
        h.cluster(cluster_id).change_config(job_id, {"touched": True})
        await h.planner.state.save_cluster(h.cluster(cluster_id))
    reply = await h.send(ApproveJob(job_id=job_id), principal="apo")
    assert isinstance(reply, Rejected) and "changed since the plan was approved" in reply.reason
    await h.settle()
    assert h.job(job_id).state == "failed" and h.queue.take() == []


async def test_an_approval_expires_and_the_expiry_survives_a_restart() -> None:
    h = Harness()
    job_id, _ = await approval_pending(h)
    await h.restart()
    await h.clock.advance(601)
    await h.settle()
    assert h.job(job_id).state == "failed" and "nobody approved" in h.job(job_id).error
    assert "JobApprovalExpired" in h.history(job_id)
    # The reason says the time as every human view does (`muster status`, the console, a
    # job_failed notification's text), not the log's ISO form (walk of session 26).
    assert re.search(r"nobody approved the job before \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$", h.job(job_id).error), h.job(job_id).error


async def test_a_job_that_needed_approval_is_not_given_another_layout_nobody_approved() -> None:
    h = Harness()
    await put(h, "rule", "creates", operations=["create"], expires_after_s=600)
    h.behaviour = fails_creates(3)  # the approved plan fails past its retries
    reply = await h.send(CreateCluster(name="r", template="hadoop-small", nodes=3, relayout=1), principal="uma")
    assert isinstance(reply, Accepted) and any(w.startswith("relayout 1 is off for this job") for w in reply.warnings)
    await h.settle()
    ok = await h.send(ApproveJob(job_id=reply.job_id), principal="apo")
    assert isinstance(ok, Accepted), ok
    await h.settle()
    job = h.job(reply.job_id)
    assert job.state == "rolled_back" and "JobLayoutRetried" not in h.history(reply.job_id)
    assert "no other layout was tried: the job's plan was approved" in job.error
    assert not [r for r in h.log.records if r.type == "LayoutRequested" and getattr(r.event, "round", 0) > 0]


async def test_a_policy_deleted_and_applied_again_is_enforced_as_it_is_now() -> None:
    """Applied again after a delete, a policy's version may be the one the deleted policy had
    (a log written before versions went on across deletes): the planner kept evaluating the
    deleted source, compiled once by (tenant, name, version)."""
    h = Harness()
    subject = subjects.governance_events("default", "policy", "limit")

    async def apply(nodes: int, tag: str) -> None:
        source = f'package muster.limit\nimport rego.v1\ndeny contains "over {nodes} nodes" if input.nodes.after > {nodes}\n'
        await h.log.append(subject, [Append(GovernancePut(kind="policy", name="limit", entity={"name": "limit", "source": source},
                                                          version=1, by="ada"), msg_id=f"{subject}:{tag}")])

    await apply(3, "first")
    assert isinstance(await h.send(CreateCluster(name="a", template="hadoop-small", nodes=5, dry_run=True)), DryRun)
    refused = await h.send(CreateCluster(name="a", template="hadoop-small", nodes=5), principal="uma")
    assert isinstance(refused, Rejected) and "over 3 nodes" in refused.reason
    await h.log.append(subject, [Append(GovernanceDeleted(kind="policy", name="limit", by="ada"), msg_id=f"{subject}:gone")])
    await apply(10, "again")
    accepted = await h.send(CreateCluster(name="a", template="hadoop-small", nodes=5), principal="uma")
    assert isinstance(accepted, Accepted), accepted


SLOW = """package muster.slow
import rego.v1

deny contains "never" if {
    some i in numbers.range(1, 3000)
    some j in numbers.range(1, 3000)
    i * j < 0
}
"""


async def test_a_policy_that_runs_too_long_denies_by_its_deadline_and_the_next_request_is_judged_again() -> None:
    """Evaluated in the planner, this policy held its event loop (every tenant's requests, its
    heartbeats) for about 17 s until rego-cpp's statement limit stopped it; a larger range took
    10 GB. Now it is evaluated in a child process and denies at the deadline."""
    h = Harness(config=PlannerConfig(instance="planner-test", policy_deadline_s=0.5))
    await put(h, "policy", "slow", source=SLOW)
    refused = await h.send(CreateCluster(name="s", template="hadoop-small", nodes=3), principal="uma")
    assert isinstance(refused, Rejected) and "policy 'slow' failed to evaluate: it ran longer than 0.5 s" in refused.reason, refused
    assert "fail closed" in refused.reason
    denied = [r.event for r in h.log.records if r.type == "RequestDenied"]
    assert [d.denials[0].policy for d in denied] == ["slow"]
    subject = subjects.governance_events("default", "policy", "slow")
    await h.log.append(subject, [Append(GovernanceDeleted(kind="policy", name="slow", by="ada"), msg_id=f"{subject}:gone")])
    await put(h, "policy", "nodes", source=NODES)  # a new evaluator process takes the next request
    big = await h.send(CreateCluster(name="s", template="hadoop-small", nodes=50), principal="uma")
    assert isinstance(big, Rejected) and "at most 10 nodes per cluster; 50 asked (policy nodes)" in big.reason, big


async def test_the_requester_may_reject_its_own_job_without_approve() -> None:
    """docs/governance.md: "a requester may always reject its own job". The planner asked for
    `approve` first, so a requester without it (most of them) was refused."""
    grants = [("builder", perm, Scope(tenant="default", kind="cluster", id="*")) for perm in ("write", "execute")]
    h = Harness(identities=identities(*grants, READS_TEMPLATES, ("reader", "read", Scope(tenant="default"))))
    await put(h, "rule", "creates", operations=["create"], expires_after_s=600)
    waiting = await h.send(CreateCluster(name="w", template="hadoop-small", nodes=3), principal="builder")
    assert isinstance(waiting, Accepted) and "waits for approval" in waiting.warnings[0], waiting
    # until when, as `muster status` says it (it said `2026-12-01T14:41:53.193697Z`)
    assert re.search(r" until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC: `muster job approve \S+`", waiting.warnings[0]), waiting.warnings
    approve = await h.send(ApproveJob(job_id=waiting.job_id), principal="builder")
    # Why it may not (no grant would help); it named a grant of `approve` to ask for.
    assert isinstance(approve, Rejected) and approve.reason.startswith(
        f"builder may not approve job {waiting.job_id}: builder asked for it, and not every rule that matched allows "
        "self-approval"), approve
    assert "muster grant" not in approve.reason and approve.code == "forbidden"
    other = await h.send(RejectJob(job_id=waiting.job_id), principal="reader")  # not its job, no `approve`
    assert isinstance(other, Rejected) and other.reason.startswith(
        f"reader may not reject job {waiting.job_id}: reader has no approve permission"), other
    stranger = await h.send(ApproveJob(job_id=waiting.job_id), principal="reader")
    # Session 35: the same sentence as the requester's, with its own reason (it was the grant's
    # refusal alone, in another shape: `reader has no approve permission on ...`).
    assert isinstance(stranger, Rejected) and stranger.reason.startswith(
        f"reader may not approve job {waiting.job_id}: reader has no approve permission on job {waiting.job_id}"), stranger
    own = await h.send(RejectJob(job_id=waiting.job_id, comment="not now after all"), principal="builder")
    assert isinstance(own, Accepted), own
    await h.settle()
    assert "rejected by builder: not now after all" in h.job(waiting.job_id).error


async def test_policies_see_what_the_tenants_clusters_cost_an_hour_so_a_budget_can_be_kept() -> None:
    """`input.tenant` had the tenant's clusters and nodes but not their cost: a per-cluster
    ceiling could be written, a tenant's budget could not (examples/policies/tenant_budget.rego)."""
    h = Harness()
    first = await h.cluster_of(nodes=3)
    await put(h, "policy", "nodes", source=NODES)  # any policy: the tenant's requests are judged
    gone = await h.send(DeleteCluster(cluster_id=first, dry_run=True))
    assert isinstance(gone, DryRun) and gone.cost is not None and gone.policy is not None
    spent = gone.cost["before_per_hour"]
    assert spent > 0 and gone.policy["input"]["tenant"]["per_hour"] == spent
    new = await h.send(CreateCluster(name="b", template="hadoop-small", nodes=2, dry_run=True))
    assert isinstance(new, DryRun) and new.policy is not None and new.policy["input"]["tenant"]["per_hour"] == spent
    budget = (Path(__file__).parents[3] / "examples" / "policies" / "tenant_budget.rego").read_text()
    await put(h, "policy", "tenant_budget", source=budget.replace("budget := 5", f"budget := {spent + 0.01}"))
    refused = await h.send(CreateCluster(name="b", template="hadoop-small", nodes=2), principal="uma")
    assert isinstance(refused, Rejected) and "its budget is" in refused.reason, refused


# -- an approval judges the plan with the policies as they are then (decision 42) ------------------

NO_DELETES = 'package muster.freeze\nimport rego.v1\n\ndeny contains "no deletes this week" if input.operation == "delete"\n'


async def test_a_policy_added_while_the_job_waited_denies_its_approval_and_the_job_ends_denied() -> None:
    """The approved plan ran with the policies of its request: a freeze applied while it waited
    for an approver did not stop it."""
    h = Harness()
    job_id, cluster_id = await approval_pending(h)
    await put(h, "policy", "freeze", source=NO_DELETES)
    reply = await h.send(ApproveJob(job_id=job_id, comment="fine by me"), principal="apo")
    assert isinstance(reply, Rejected) and reply.code == "forbidden", reply
    assert "approved by apo, but the tenant's policies deny it now: no deletes this week (policy freeze)" in reply.reason
    await h.settle()
    job = h.job(job_id)
    assert job.state == "failed" and "no deletes this week" in job.error and h.queue.take() == []
    assert h.cluster(cluster_id).status == "active"  # nothing ran
    denied = [r.event for r in h.log.records if r.type == "RequestDenied"]
    assert [(d.job_id, d.by, d.approved_by, d.denials[0].policy) for d in denied] == [(job_id, "uma", "apo", "freeze")]
    assert "approved by apo: fine by me" in [describe(r.event) for r in h.job_records(job_id)]
    assert isinstance(await h.send(ApproveJob(job_id=job_id), principal="apo"), Rejected)  # decided: once


async def test_two_creates_within_the_budget_alone_wait_and_the_second_approval_is_denied_over_it() -> None:
    """Each request fitted the tenant's budget when it was made; approved one after the other
    they did not, and both ran."""
    h = Harness()
    await put(h, "rule", "creates", operations=["create"], expires_after_s=600)
    preview = await h.send(CreateCluster(name="a", template="hadoop-small", nodes=2, dry_run=True))
    assert isinstance(preview, DryRun) and preview.cost is not None
    one = preview.cost["per_hour"]
    budget = (Path(__file__).parents[3] / "examples" / "policies" / "tenant_budget.rego").read_text()
    await put(h, "policy", "tenant_budget", source=budget.replace("budget := 5", f"budget := {one * 1.5}"))
    first = await h.send(CreateCluster(name="a", template="hadoop-small", nodes=2, request_id="a"), principal="uma")
    second = await h.send(CreateCluster(name="b", template="hadoop-small", nodes=2, request_id="b"), principal="uma")
    assert isinstance(first, Accepted) and isinstance(second, Accepted), (first, second)
    await h.settle()
    assert isinstance(await h.send(ApproveJob(job_id=first.job_id), principal="apo"), Accepted)
    await h.settle()
    assert h.job(first.job_id).state == "succeeded"
    over = await h.send(ApproveJob(job_id=second.job_id), principal="apo")
    assert isinstance(over, Rejected) and "its budget is" in over.reason, over
    await h.settle()
    assert h.job(second.job_id).state == "failed" and h.cluster(second.cluster_id).status == "deleted"  # its name free again
    again = await h.send(CreateCluster(name="b", template="hadoop-small", nodes=2, dry_run=True))
    assert isinstance(again, DryRun) and again.policy is not None and "its budget is" in again.policy["deny"][0]


async def test_an_approval_tells_and_records_the_cost_at_the_prices_it_was_approved_at() -> None:
    h = Harness()
    job_id, _ = await approval_pending(h)
    await put(h, "policy", "any", source='package muster.any\nimport rego.v1\n\nwarn contains "looked at" if input.operation == "delete"\n')
    ok = await h.send(ApproveJob(job_id=job_id), principal="apo")
    assert isinstance(ok, Accepted) and ok.warnings == ["looked at (policy any)"], ok
    approved = h.events(job_id, "JobApproved")[0]
    assert approved.cost is not None and approved.cost.per_hour == 0  # a delete leaves nothing to pay for
    assert [w.message for w in h.events(job_id, "PolicyWarned")[-1].warnings] == ["looked at"]


def double_the_prices(h: Harness) -> None:
    """Every hardware type's cost per hour, twice what it was (a price rise while a job waits)."""
    catalog = h.catalogs.by_tenant["default"].model_copy(deep=True)
    for hardware in catalog.hardwaretypes.values():
        for fields in hardware.providermap.values():
            fields["cost"] = str(float(fields.get("cost", 0)) * 2)
    h.catalogs.by_tenant["default"] = catalog


async def waiting_then_prices_doubled() -> tuple[Harness, Accepted, Any]:
    """A create waiting for approval, the cost it was asked at, and then the prices doubled."""
    h = Harness()
    await put(h, "rule", "creates", operations=["create"], expires_after_s=600)
    waiting = await h.send(CreateCluster(name="p", template="hadoop-small", nodes=2), principal="uma")
    assert isinstance(waiting, Accepted)
    await h.settle()
    asked = h.events(waiting.job_id, "JobApprovalRequested")[0].cost
    assert asked is not None and asked.per_hour > 0
    double_the_prices(h)
    return h, waiting, asked


async def test_an_approval_after_a_price_rise_says_what_the_plan_costs_now() -> None:
    h, waiting, asked = await waiting_then_prices_doubled()
    ok = await h.send(ApproveJob(job_id=waiting.job_id), principal="apo")
    assert isinstance(ok, Accepted), ok
    shown = f"{asked.per_hour * 2:.2f}/h at the catalog's prices now ({asked.per_hour:.2f}/h when it was requested)"
    assert any(shown in w for w in ok.warnings), ok.warnings
    cost = h.events(waiting.job_id, "JobApproved")[0].cost
    assert cost is not None and cost.per_hour == asked.per_hour * 2
    assert h.job(waiting.job_id).view()["approval"]["approved_cost"]["per_hour"] == asked.per_hour * 2


async def test_a_waiting_job_answers_its_cost_at_todays_prices() -> None:
    """`muster status`, `GET /v1/jobs/{id}` and the console showed the cost at the request until
    someone pressed Check first, whatever the prices now (which an approval judges, decision 42)."""
    h, waiting, asked = await waiting_then_prices_doubled()
    view = await h.planner.job_answer("default", waiting.job_id)
    assert view is not None and view["state"] == "waiting_for_approval"
    assert view["approval"]["cost"]["per_hour"] == asked.per_hour  # what it was asked at, as recorded
    now = view["approval"]["cost_now"]
    assert (now["per_hour"], now["before_per_hour"]) == (asked.per_hour * 2, 0) and "per_node" not in now
    assert "cost_now" not in (h.job(waiting.job_id).view()["approval"] or {})  # the job keeps what was recorded
    assert isinstance(await h.send(ApproveJob(job_id=waiting.job_id), principal="apo"), Accepted)
    decided = await h.planner.job_answer("default", waiting.job_id)
    assert decided is not None and "cost_now" not in decided["approval"]  # decided: the approval's own cost says it


async def test_an_approved_create_is_not_counted_among_the_tenants_clusters_it_is_judged_with() -> None:
    """At its approval a create's cluster is in the planner's state (its request made it); counted
    in `input.tenant`, a one-cluster-per-tenant policy denied the tenant's first cluster."""
    h = Harness()
    await put(h, "rule", "creates", operations=["create"], expires_after_s=600)
    await put(h, "policy", "one", source='package muster.one\nimport rego.v1\n\n'
              'deny contains "one cluster per tenant" if {\n    input.operation == "create"\n    input.tenant.clusters >= 1\n}\n')
    waiting = await h.send(CreateCluster(name="only", template="hadoop-small", nodes=2), principal="uma")
    assert isinstance(waiting, Accepted), waiting
    await h.settle()
    ok = await h.send(ApproveJob(job_id=waiting.job_id), principal="apo")
    assert isinstance(ok, Accepted), ok
    await h.settle()
    assert h.job(waiting.job_id).state == "succeeded"
    second = await h.send(CreateCluster(name="two", template="hadoop-small", nodes=2), principal="uma")
    assert isinstance(second, Rejected) and "one cluster per tenant" in second.reason


async def test_an_approver_sees_what_an_approval_now_would_find_without_deciding() -> None:
    """`muster job approve --dry-run`: the approver saw the cost and the policies of the request
    only, and learnt what had changed once it had approved."""
    h, waiting, asked = await waiting_then_prices_doubled()
    await put(h, "policy", "ceiling", source=CEILING)  # over 2 nodes, over 0.01/h: denies now
    before = len(h.log.records)
    seen = await h.send(ApproveJob(job_id=waiting.job_id, dry_run=True), principal="apo")
    assert isinstance(seen, DryRun) and seen.policy is not None and seen.cost is not None, seen
    assert seen.policy["deny"] == ["over 0.01/h (policy ceiling)"] and seen.cost["per_hour"] == asked.per_hour * 2
    assert seen.layout is not None and len(seen.plan["tasks"]) > 0
    assert any("at the catalog's prices now" in w for w in seen.warnings), seen.warnings
    assert len(h.log.records) == before and h.job(waiting.job_id).awaiting_approval  # nothing decided, nothing recorded
    own = await h.send(ApproveJob(job_id=waiting.job_id, dry_run=True), principal="uma")
    assert isinstance(own, Rejected) and "may not approve" in own.reason  # an approver's look, as its decision is
    decided = await h.send(ApproveJob(job_id=waiting.job_id), principal="apo")
    assert isinstance(decided, Rejected) and "over 0.01/h" in decided.reason


SPENT = 'package muster.spent\nimport rego.v1\n\ndeny contains msg if {\n    input.operation == "delete"\n    msg := sprintf("NODES=%v", [input.tenant.nodes])\n}\n'


async def test_an_approver_that_may_not_read_the_totals_is_told_the_policy_not_its_words() -> None:
    """A policy's words may say the tenant's totals (docs/security.md, "What a refusal names"):
    an approver with `approve` on the one cluster is told which policy denies, the job's record
    says it to no reader, the log's `RequestDenied` (read by the tenant's readers) has the words."""
    ids = identities(("builder", "write", Scope(tenant="default", kind="cluster", id="*")), READS_TEMPLATES)
    h = Harness(identities=ids)
    made = await h.send(CreateCluster(name="w", template="hadoop-small", nodes=2, request_id="w"), principal="builder")
    assert isinstance(made, Accepted), made
    await h.settle()
    await put(h, "rule", "deletes", operations=["delete"], expires_after_s=600)
    waiting = await h.send(DeleteCluster(cluster_id=made.cluster_id, request_id="del"), principal="builder")
    assert isinstance(waiting, Accepted), waiting
    await h.settle()
    on_it = Scope(tenant="default", kind="cluster", id=made.cluster_id)
    ids.apply(PermissionGranted(principal="operator", permission="approve", scope=on_it, by="root"), 100)
    await put(h, "policy", "spent", source=SPENT)
    seen = await h.send(ApproveJob(job_id=waiting.job_id, dry_run=True), principal="operator")
    assert isinstance(seen, DryRun) and seen.policy is not None, seen
    assert seen.policy["deny"][0].startswith("a deny rule holds whose message is not shown to operator: the policy reads "
                                             "the tenant's totals"), seen.policy
    assert seen.policy["input"]["tenant"]["nodes"] is None and "NODES=" not in str(seen.model_dump())  # it showed them whole
    told = await h.send(ApproveJob(job_id=waiting.job_id, dry_run=True), principal="root")
    assert isinstance(told, DryRun) and told.policy is not None and told.policy["deny"] == ["NODES=2 (policy spent)"], told.policy
    decided = await h.send(ApproveJob(job_id=waiting.job_id), principal="operator")
    assert isinstance(decided, Rejected) and "not shown to operator" in decided.reason and "NODES=" not in decided.reason
    await h.settle()
    job = h.job(waiting.job_id)
    assert job.state == "failed" and "kept from the job's record" in job.error and "NODES=" not in job.error, job.error
    [denied] = [r.event for r in h.log.records if r.type == "RequestDenied"]
    assert denied.denials[0].message == "NODES=2" and denied.approved_by == "operator"


async def test_an_approver_that_may_not_read_the_prices_is_shown_the_plan_without_them() -> None:
    """`muster job approve --dry-run` and an approval's answer showed an approver without `read`
    on the hardware types the plan's prices and how they moved, which `muster cluster cost` and
    a waiting job's status hide from it (docs/governance.md, "Who sees a waiting job's cost")."""
    h, waiting, asked = await approver_reading()
    assert asked.per_hour > 0
    double_the_prices(h)
    seen = await h.send(ApproveJob(job_id=waiting.job_id, dry_run=True), principal="operator")
    assert isinstance(seen, DryRun) and seen.cost is not None and seen.policy is not None, seen
    assert seen.cost["per_hour"] == 0 and seen.cost["unknown"] == sorted(asked.by_hardware), seen.cost
    assert seen.policy["input"]["cost"]["per_hour"] == 0
    figures = (f"{asked.per_hour:.2f}", f"{asked.per_hour * 2:.2f}")
    assert not any("prices now" in w for w in seen.warnings), seen.warnings  # it would say that a price it may not read moved
    assert not any(f in w for w in seen.warnings for f in figures), seen.warnings
    told = await h.send(ApproveJob(job_id=waiting.job_id, dry_run=True), principal="root")  # reads the catalog
    assert isinstance(told, DryRun) and told.cost is not None and told.cost["per_hour"] == asked.per_hour * 2, told
    ok = await h.send(ApproveJob(job_id=waiting.job_id), principal="operator")
    assert isinstance(ok, Accepted) and not any("prices now" in w or any(f in w for f in figures) for w in ok.warnings), ok


async def test_a_policy_stored_before_a_check_denies_every_operation_it_judges_saying_which_and_how_to_end_it() -> None:
    """An upgrade: the log holds policies `policy apply` refuses now (applied before session 33's
    checks). They ran as stored: `limit` (unbound) allowed every request, a v0 `deny[msg]` denied
    every request as "failed to evaluate" and a dry run too. Now each denies, naming the check."""
    h = Harness()
    await put(h, "policy", "lim", source='package lim\nimport rego.v1\n\ndeny contains "too big" if {\n'
                                          '  input.request.nodes > limit\n}\n')
    refused = await h.send(CreateCluster(name="a", template="hadoop-small", nodes=5), principal="uma")
    assert isinstance(refused, Rejected) and refused.code == "forbidden", refused
    assert refused.reason.startswith("the tenant's policies deny it: policy 'lim' (version 1) fails a check `muster policy "
                                     "apply` makes now"), refused.reason
    assert "(line 5) reads `limit`" in refused.reason and "`muster policy delete lim`" in refused.reason
    assert refused.reason.endswith("(policy lim)"), refused.reason
    denied = [r.event for r in h.log.records if r.type == "RequestDenied"]
    assert [d.denials[0].policy for d in denied] == ["lim"]
    preview = await h.send(CreateCluster(name="a", template="hadoop-small", nodes=5, dry_run=True))
    assert isinstance(preview, DryRun) and preview.policy is not None and "fails a check" in preview.policy["deny"][0]
    # Deleted, the tenant's requests are judged by what remains (nothing).
    subject = subjects.governance_events("default", "policy", "lim")
    await h.log.append(subject, [Append(GovernanceDeleted(kind="policy", name="lim", by="ada"), msg_id=f"{subject}:gone")])
    assert isinstance(await h.send(CreateCluster(name="a", template="hadoop-small", nodes=5), principal="uma"), Accepted)


async def approver_reading(*types: str) -> tuple[Harness, Accepted, Any]:
    """A create of 2 small nodes waiting for approval; `operator` may approve it and read the
    prices of `types` only; the cost the request recorded."""
    reads = [("operator", "read", Scope(tenant="default", kind="catalog", id=f"hardwaretypes/{t}")) for t in types]
    ids = identities(("builder", "write", Scope(tenant="default", kind="cluster", id="*")), READS_TEMPLATES,
                     ("operator", "approve", Scope(tenant="default", kind="cluster", id="*")), *reads)
    h = Harness(identities=ids)
    await put(h, "rule", "creates", operations=["create"], expires_after_s=600)
    waiting = await h.send(CreateCluster(name="p", template="hadoop-small", nodes=2, request_id="p"), principal="builder")
    assert isinstance(waiting, Accepted), waiting
    await h.settle()
    asked = h.events(waiting.job_id, "JobApprovalRequested")[0].cost
    assert asked is not None and set(asked.by_hardware) == {"small"}, asked
    return h, waiting, asked


async def test_an_approver_reading_every_price_in_the_plan_is_shown_todays_prices_though_it_may_not_read_another_type() -> None:
    """The dry run of an approval priced the plan again from the catalog the plan was made with
    whenever the approver could not read some hardware type of the catalog (`large` here, in no
    node of the plan): after a price rise it showed the price of the request, where the policies
    judged today's and `muster status` showed today's (`approval.cost_now`)."""
    h, waiting, asked = await approver_reading("small")
    double_the_prices(h)
    seen = await h.send(ApproveJob(job_id=waiting.job_id, dry_run=True), principal="operator")
    assert isinstance(seen, DryRun) and seen.cost is not None and seen.policy is not None, seen
    assert seen.cost["per_hour"] == asked.per_hour * 2 and seen.cost["unknown"] == [], seen.cost
    assert seen.policy["input"]["cost"]["per_hour"] == asked.per_hour * 2


async def test_what_an_approver_is_shown_does_not_change_when_a_price_it_may_not_read_does() -> None:
    """Its approval's dry run said "its cost at the catalog's prices now differs from the one
    when it was requested" when only the prices it may not read had moved: it learnt that they
    had (docs/governance.md, "Who sees a waiting job's cost")."""
    h, waiting, _ = await approver_reading()
    before = await h.send(ApproveJob(job_id=waiting.job_id, dry_run=True), principal="operator")
    double_the_prices(h)
    after = await h.send(ApproveJob(job_id=waiting.job_id, dry_run=True), principal="operator")
    assert isinstance(before, DryRun) and isinstance(after, DryRun), (before, after)
    assert (after.cost, after.policy, after.warnings) == (before.cost, before.policy, before.warnings), after
    told = await h.send(ApproveJob(job_id=waiting.job_id, dry_run=True), principal="root")  # reads every price: told
    assert isinstance(told, DryRun) and any("at the catalog's prices now" in w for w in told.warnings), told.warnings


async def test_a_planner_answers_a_jobs_view_to_the_tracker_not_to_a_user_on_the_bus() -> None:
    """A user may send on its own `muster.q.<tenant>.<principal>.>`: `dave`, with no grant at all,
    asked a planner for a waiting job's view there and read it whole, its cost's prices too, which
    the tracker refuses him (session 34, docs/security.md)."""
    h, waiting, asked = await approver_reading()
    ids = identities()
    ids.apply(PrincipalCreated(principal="tracker", role="service", service="tracker", by="root"), 200)
    replies = Replies(h.planner, identities=ids)
    for who in ("reader", "operator", "nobody"):
        said = json.loads(await replies.job_query(subjects.job_query("default", who, waiting.job_id), b"") or b"{}")
        assert "tracker" in said.get("refused", "") and "approval" not in said, (who, said)
    for who in ("tracker", "root"):
        view = json.loads(await replies.job_query(subjects.job_query("default", who, waiting.job_id), b"") or b"{}")
        assert view["approval"]["cost"]["per_hour"] == asked.per_hour, (who, view)
