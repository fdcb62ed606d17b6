"""Identities in the planner: the requester's grants decide (read-only cannot create, execute
controls jobs), `by` is the subject's principal, and only the provisioner that claimed an
attempt records its outcome (a forged TaskSucceeded with 6.6.6.6 changes nothing)."""

from __future__ import annotations

from planner_harness import Harness, identities

from contracts import subjects
from contracts.commands import Accepted, CreateCluster, DryRun, PauseJob, Rejected, RestartServices
from contracts.events import TaskClaimed, TaskSucceeded
from contracts.identity import Scope, TenantCreated
from muster.ports.eventlog import Append
from services.auth.domain.state import IdentityState


def harness(state: IdentityState) -> Harness:
    return Harness(identities=state)


TENANT = Scope(tenant="default")
CREATE = CreateCluster(name="c1", template="hadoop-small", nodes=3)


async def test_read_only_cannot_create_and_write_on_every_cluster_can() -> None:
    state = identities(("reader", "read", TENANT), ("builder", "write", Scope(tenant="default", kind="cluster", id="*")),
                       ("builder", "read", Scope(tenant="default", kind="catalog", id="*")))
    h = harness(state)
    refused = await h.send(CREATE, principal="reader")
    assert isinstance(refused, Rejected) and "reader has no write permission on every cluster" in refused.reason
    assert isinstance(await h.send(CREATE, principal="stranger"), Rejected)
    accepted = await h.send(CREATE, principal="builder")
    assert isinstance(accepted, Accepted)
    await h.settle()
    assert h.job(accepted.job_id).requested_by == "builder"


async def test_execute_on_a_cluster_controls_its_jobs_and_services_but_does_not_build() -> None:
    h0 = Harness()
    cluster = await h0.cluster_of()  # before identities are checked
    scope = Scope(tenant="default", kind="cluster", id=cluster)
    h0.ports["identities"] = identities(("operator", "execute", scope))
    await h0.restart()
    h0.behaviour = lambda m: "hold"
    restart = await h0.send(RestartServices(cluster_id=cluster), principal="operator")
    assert isinstance(restart, Accepted), restart
    pause = await h0.send(PauseJob(job_id=restart.job_id), principal="operator")
    assert isinstance(pause, Accepted), pause
    assert isinstance(await h0.send(CreateCluster(name="c2", template="hadoop-small", nodes=3), principal="operator"), Rejected)


async def _forge(h: Harness, claim_from: str, outcome_from: str, body_from: str, attempt: int) -> None:
    message = h.held[0]
    key = f"{message.job_id}.{message.task_id}.{attempt}"
    common = dict(job_id=message.job_id, task_id=message.task_id, attempt=attempt, worker="w")
    claim = TaskClaimed(provisioner=claim_from, **common)
    await h.log.append(subjects.task_events(message.tenant, message.job_id, message.task_id, claim_from),
                       [Append(claim, msg_id=f"{key}.claim.{claim_from}")])
    forged = TaskSucceeded(provisioner=body_from, ipaddresses={"access_v4": "6.6.6.6"}, **common)
    await h.log.append(subjects.task_events(message.tenant, message.job_id, message.task_id, outcome_from),
                       [Append(forged, msg_id=f"{key}.outcome.{outcome_from}.{body_from}")])
    await h.settle()


async def test_only_the_provisioner_holding_an_attempt_records_its_outcome() -> None:
    h = Harness()
    h.behaviour = lambda m: "hold"
    reply = await h.send(CREATE)
    assert isinstance(reply, Accepted)
    await h.settle()
    first = h.held[0]
    # An outcome written under another provisioner's id, or naming another in its body: nothing.
    await _forge(h, claim_from="prov-a", outcome_from="prov-evil", body_from="prov-evil", attempt=first.attempt)
    await _forge(h, claim_from="prov-a", outcome_from="prov-a", body_from="prov-b", attempt=first.attempt)
    job = h.job(reply.job_id)
    assert job.view()["counts"].get("succeeded", 0) == 0
    assert "6.6.6.6" not in str(h.cluster(reply.cluster_id).ipaddresses)
    # The holder's own outcome is taken.
    await _forge(h, claim_from="prov-a", outcome_from="prov-a", body_from="prov-a", attempt=first.attempt)
    assert h.job(reply.job_id).view()["counts"].get("succeeded", 0) == 1


async def test_a_super_admin_s_request_in_a_tenant_no_one_made_is_refused_as_the_tracker_refuses_its_reads() -> None:
    """`--tenant acmee` (a typo) made a first cluster there, which the tracker then would not
    list ("no tenant 'acmee'"); a tenant made is served, and `default` needs no making."""
    state = identities()
    h = harness(state)
    refused = await h.send(CREATE, tenant="acmee", principal="root")
    assert isinstance(refused, Rejected) and refused.reason.startswith("no tenant 'acmee' (`muster tenant list`"), refused
    assert not [r for r in h.log.records if ".acmee." in r.subject]
    assert isinstance(await h.send(CREATE, principal="root"), Accepted)
    state.apply(TenantCreated(tenant="acme", by="root"), 100)
    made = await h.send(CREATE, tenant="acme", principal="root")  # (no catalog there: any answer but the tenant's)
    assert not (isinstance(made, Rejected) and made.reason.startswith("no tenant")), made


async def test_the_log_keeps_the_request_as_its_principal_sent_it_not_the_clients_claim() -> None:
    """A create by builder whose CLI claimed `requested_by: root` (the CLI's default is the OS
    user's name) was recorded with `root` inside the job's request and the saved plan's: the
    super admin's name in a user's job, read by `muster events`, and what a policy reads as
    `input.request.requested_by`. The request is recorded as its principal sent it; a retry with
    the key is still the same request, and another principal's request with it is not."""
    state = identities(("builder", "write", Scope(tenant="default", kind="cluster", id="*")),
                       ("builder", "read", Scope(tenant="default", kind="catalog", id="*")),
                       ("operator", "write", Scope(tenant="default", kind="cluster", id="*")),
                       ("operator", "read", Scope(tenant="default", kind="catalog", id="*")))
    h = harness(state)
    claimed = CREATE.model_copy(update={"requested_by": "root", "request_id": "k1"})
    preview = await h.send(claimed.model_copy(update={"dry_run": True}), principal="builder")
    assert isinstance(preview, DryRun), preview
    [saved] = [r.event for r in h.log.records if r.type == "PlanSaved"]
    assert saved.command["requested_by"] == "builder" and saved.by == "builder"
    accepted = await h.send(claimed, principal="builder")
    assert isinstance(accepted, Accepted), accepted
    [requested] = h.events(accepted.job_id, "JobRequested")
    assert requested.request["requested_by"] == "builder" and requested.requested_by == "builder"
    again = await h.send(claimed, principal="builder")
    assert isinstance(again, Accepted) and again.duplicate and again.job_id == accepted.job_id, again
    theirs = await h.send(claimed, principal="operator")
    assert isinstance(theirs, Rejected) and theirs.field == "request_id" and theirs.code == "conflict", theirs
    # ... told nothing of builder's request (its job, cluster, operation): docs/security.md.
    assert theirs.job_id is None and accepted.job_id not in theirs.reason and accepted.cluster_id not in theirs.reason, theirs
    assert "by another principal's request" in theirs.reason and "create" not in theirs.reason, theirs
