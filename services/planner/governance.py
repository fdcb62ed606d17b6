"""Governance in admission: the tenant's approval rules and policies on a request, its plan and
its cost; and the decisions on a job that waits for approval (docs/governance.md).

A tenant with rules or policies has every request planned at admission (a layout asked of the
solver over request/reply, as a dry run does), so the policies see the solved layout, the plan
and its cost, and a request is refused at once with a policy's message (`RequestDenied` is
recorded), or accepted at once, waiting for an approver when a rule matches
(`JobApprovalRequested`, with the layout and the plan's digest). An approval runs exactly that
plan: derived again from the recorded layout, it must have the same digest, and the cluster
must be at the version it was planned on; otherwise the job is refused, not planned again. The
tenant's policies as they are at the approval then judge it again (`again`, decision 42).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from contracts import subjects
from contracts.approvals import JobApprovalRequested, PlanCost, PolicyMessage, PolicyWarned, RequestDenied
from contracts.commands import VERB_OF, ApproveJob
from contracts.governance import ApprovalRule
from contracts.layout import Layout
from muster.ports.clock import Clock
from muster.ports.eventlog import Append
from muster.readmodel.cost import rate
from muster.readmodel.priced import Hidden, masked
from muster.times import shown_time
from services.governance.domain import approvals, disclosure
from services.governance.domain.cost import per_hour, plan_cost
from services.governance.domain.entities import fold
from services.governance.domain.inputs import document
from services.governance.domain.policies import Finding, PolicySource, Verdict
from services.governance.domain.references import reads_tenant_totals
from services.governance.sandbox import PolicySandbox

from . import traces
from .domain import spend
from .domain.admission import Facts, Refused
from .domain.cluster import Cluster
from .domain.job import Job
from .domain.saved import plan_digest
from .spend import SharedSpend
from .state import PlannerState


@dataclass
class Rules:
    """A tenant's approval rules and policies, read for one request."""

    rules: list[ApprovalRule] = field(default_factory=list)
    policies: list[PolicySource] = field(default_factory=list)

    @property
    def active(self) -> bool:
        return bool(self.rules or self.policies)

    @property
    def spends(self) -> bool:
        """A policy reads the tenant's totals: its admissions reserve what they add (decision 44)."""
        return any(reads_tenant_totals(p.source) for p in self.policies)


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    wait: approvals.Wait | None
    cost: PlanCost
    input: dict[str, Any]
    """The document the policies were evaluated on (a dry run shows it: `muster policy test --input`)."""
    seen: int = 0
    """The revision of the tenant's shared spend its totals were read at (a reservation's check)."""
    reads: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Policy -> the scopes a reader needs `read` on to be shown its messages (`disclosure.reads`)."""


def _messages(findings: tuple[Finding, ...]) -> list[PolicyMessage]:
    return [PolicyMessage(policy=f.policy, version=f.version, message=f.message) for f in findings]


def cluster_input(cluster: Cluster | None) -> dict[str, Any] | None:
    if cluster is None:
        return None
    return {"id": str(cluster.id), "name": cluster.name, "template": cluster.template, "provider": cluster.provider,
            "status": cluster.status, "nodes": len(cluster.nodes), "labels": labels(cluster), "config": cluster.config,
            "lease_expires_at": cluster.expires_at.isoformat() if cluster.expires_at else None, "owner": cluster.owner}


def labels(cluster: Cluster) -> dict[str, str]:
    """A cluster's labels: its config's `labels` map (`{"labels": {"env": "prod"}}`)."""
    found = cluster.config.get("labels")
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


CatalogReader = Callable[[str | None, str], Callable[[str], bool]]
TotalsReader = Callable[[str | None, str], bool]


class Governance:
    def __init__(self, state: PlannerState, clock: Clock, role_of: Any = None, sandbox: PolicySandbox | None = None,
                 shared: SharedSpend | None = None, catalog_reader: CatalogReader | None = None,
                 totals_reader: TotalsReader | None = None) -> None:
        self.state, self.clock, self.shared = state, clock, shared
        """`shared`: the tenants' spend on the other planners' shards (None: one planner, every cluster)."""
        self.role_of = role_of or (lambda principal: "unknown")
        self.catalog_reader: CatalogReader = catalog_reader or (lambda principal, tenant: lambda entity: True)
        self.totals_reader: TotalsReader = totals_reader or (lambda principal, tenant: True)
        """What a principal may read of a tenant's catalog and totals (`authz.catalog_reads`,
        `totals_reads`): what a policy's message and a preview show it (`disclosure`)."""
        self.sandbox = sandbox or PolicySandbox()
        """Where policies are evaluated: a child process, each policy within a deadline."""

    async def load(self, tenant: str) -> Rules:
        """The rules and policies only: a schedule's subject grows with its ticks."""
        entries = fold(await self.state.log.read_many([subjects.governance_filter(tenant, "rule"),
                                                       subjects.governance_filter(tenant, "policy")]))
        rules = [ApprovalRule.model_validate(e.entity) for (kind, _), e in sorted(entries.items()) if kind == "rule"]
        # Compiled where they are evaluated, keyed by their source too: a policy deleted and
        # applied again had its old version number, and a cache by version kept the deleted one.
        policies = [PolicySource(name, e.version, str(e.entity.get("source", "")))
                    for (kind, name), e in sorted(entries.items()) if kind == "policy"]
        return Rules(rules, policies)

    async def judge(self, rules: Rules, facts: Facts, by: str, before: Cluster | None, after: Cluster,
                    target: list[Any], actions: list[str]) -> Judgement:
        """The policies' verdict and the approval rules' wait, on everything admission knows."""
        now = self.clock.now()
        hardware = facts.catalog.hardwaretypes
        previous = list(before.nodes.values()) if before is not None else []
        # A delete's plan names the nodes it removes; once it is done the cluster has none (no
        # cost, no nodes: a node or cost ceiling never refuses the delete that gets under it).
        remaining = [] if facts.operation == "delete" else target
        cost = plan_cost(hardware, after.provider, remaining, previous)
        # Not the request's own cluster: at admission a new one is not there yet, at an approval it
        # is (its create waited), and counted it would be a cluster more than the tenant has.
        # The clusters of the shards this planner holds, and what the other planners wrote of theirs:
        # a tenant's totals, not this planner's (decision 44).
        # Shared (several planners): the shards this planner holds, each cluster at least what its
        # open job makes of it (a job admitted holds its room), and the other shards' entries.
        seen = self.shared.board.revision(facts.tenant) if self.shared is not None else 0
        if self.shared is not None:
            mine = self.shared.local(facts.tenant, besides=str(after.id))
            around = spend.total([mine, self.shared.elsewhere(facts.tenant)])
            clusters, nodes, spent = around["clusters"], spend.node_count(around), spend.per_hour(around, hardware)
        else:
            others = [c for c in self.state.clusters.values() if c.tenant == facts.tenant and c.status != "deleted" and c.id != after.id]
            clusters, nodes = len(others), sum(len(c.nodes) for c in others)
            spent = sum(per_hour(hardware, c.provider, c.nodes.values()) for c in others)
        doc = document(tenant=facts.tenant, operation=facts.operation.removesuffix("-restart"), now=now, requester=by,
                       role=self.role_of(by), request=facts.command.model_dump(mode="json"), cluster=cluster_input(before),
                       before=previous, after=remaining, actions=actions, cost=cost,
                       tenant_clusters=clusters + (before is not None and before.status != "deleted"),
                       tenant_nodes=nodes + len(previous),
                       # at today's prices, as this request's cost: what a budget policy adds it to
                       tenant_per_hour=spent + cost.before_per_hour)
        verdict = await self.sandbox.evaluate(rules.policies, doc)
        request = approvals.Request(VERB_OF[facts.command.type], after.name, labels(after), len(target))
        priced = {n.hardwaretype for n in [*remaining, *previous]} - set(cost.unknown)
        return Judgement(verdict, approvals.wait_for(rules.rules, request, now), cost, doc, seen,
                         reads={p.name: disclosure.reads(p.source, priced) for p in rules.policies})

    def reader(self, principal: str | None, tenant: str) -> disclosure.Reader:
        """What `principal` may read of what a policy reads (None: a reader without grants): an
        approver too reads a price only with `read` on its hardware type, as a waiting job's cost
        shows it (docs/governance.md, "Who sees a waiting job's cost")."""
        return disclosure.reader(self.catalog_reader(principal, tenant), self.totals_reader(principal, tenant))

    def hidden(self, principal: str | None, tenant: str) -> Hidden:
        """The hardware types whose prices `principal` is not shown (no `read` on
        `catalog:hardwaretypes/<name>`)."""
        may = self.catalog_reader(principal, tenant)
        return lambda name: not may(f"hardwaretypes/{name}")

    def said(self, judgement: Judgement, tenant: str, principal: str | None, who: str | None) -> tuple[list[str], list[str]]:
        """The policies' denials and warnings as `who` is told them (`disclosure.shown`: a
        message whose policy read what `who` may not read is named, not said); `who` None: the
        job's record, which a reader without grants reads too."""
        may = self.reader(principal, tenant)
        return tuple(  # type: ignore[return-value]
            [f"{f.message} (policy {f.policy})" for f in disclosure.shown(rule, found, judgement.reads, may, who)]
            for rule, found in (("deny", judgement.verdict.denials), ("warn", judgement.verdict.warnings)))

    def _recorded(self, judgement: Judgement, tenant: str) -> list[PolicyMessage]:
        """The warnings as the job records them: its record is read by whoever reads the job."""
        return _messages(tuple(disclosure.shown("warn", judgement.verdict.warnings, judgement.reads,
                                                self.reader(None, tenant), None)))

    async def deny(self, facts: Facts, by: str, cluster_id: str, judgement: Judgement) -> None:
        """Record the refusal (there is no job), then refuse with the policies' messages."""
        verdict = judgement.verdict
        event = RequestDenied(job_id=facts.job_id, cluster_id=cluster_id, operation=facts.operation, by=by,
                              denials=_messages(verdict.denials), warnings=_messages(verdict.warnings))
        subject = subjects.denied_events(facts.tenant, facts.job_id)
        await self.state.log.append(subject, [Append(event, msg_id=f"{subject}:{len(verdict.denials)}")])
        # The log (`muster history --governance`, read with `read` on the tenant) has the policies'
        # words; the requester is told those it may read (docs/security.md, "What a refusal names").
        reasons = "; ".join(self.said(judgement, facts.tenant, facts.principal, by)[0])
        # Said as what refused it: the CLI puts "expand rejected: " before it (it was "expand
        # rejected: expand denied by the tenant's policies: ...").
        raise Refused(f"the tenant's policies deny it: {reasons}", code="forbidden")

    async def again(self, job: Job, facts: Facts, after: Cluster, preview: Any, rules: Rules | None = None) -> Judgement:
        """The tenant's policies as they are now on the plan being approved (decision 42): with
        the tenant as it is now (the clusters approved meanwhile count), at the catalog's prices
        now, at this moment (a freeze window that began meanwhile), for the requester. The
        approval rules are not asked again: this is their approval. `rules`: as loaded already."""
        rules = rules or await self.load(job.tenant)
        catalog, _ = await self.state.current_catalog(job.tenant, refresh=True)
        return await self.judge(Rules(policies=rules.policies), replace(facts, catalog=catalog), job.requested_by or "",
                                facts.cluster, after, preview.target, [t.action.value for t in preview.plan.tasks])

    async def cost_now(self, job: Job) -> PlanCost | None:
        """A waiting job's plan at the catalog's prices now, as an approval now would judge it
        (decision 42): what its approver decides on. None when it does not wait. The catalog is
        read from the log, not the planner's copy, which another planner's catalog write leaves
        behind."""
        cluster = self.state.clusters.get(job.cluster_id)
        if not job.awaiting_approval or cluster is None:
            return None
        catalog, _ = await self.state.catalog_source.load(job.tenant)
        remaining = [] if job.operation == "delete" else job.nodes  # (as `judge`: a delete leaves nothing)
        return plan_cost(catalog.hardwaretypes, cluster.provider, remaining, job.previous_nodes)

    async def deny_approval(self, job: Job, by: str, judgement: Judgement) -> tuple[str, str]:
        """Record that the policies refused the approved plan; the reason the job fails with (its
        record: whoever reads the job reads it) and the approver's answer (what `by` may read)."""
        verdict = judgement.verdict
        event = RequestDenied(job_id=str(job.id), cluster_id=job.cluster_id, operation=job.operation, by=job.requested_by or "",
                              denials=_messages(verdict.denials), warnings=_messages(verdict.warnings), approved_by=by)
        subject = subjects.denied_events(job.tenant, str(job.id))
        await self.state.log.append(subject, [Append(event, msg_id=f"{subject}:approval:{len(verdict.denials)}")])
        told = (self.said(judgement, job.tenant, None, None)[0], self.said(judgement, job.tenant, by, by)[0])
        record, answer = (f"approved by {by}, but the tenant's policies deny it now: {'; '.join(r)}; nothing ran: ask again"
                          for r in told)
        return record, answer

    def news(self, job: Job, judgement: Judgement, by: str) -> list[str]:
        """What an approval's answer says: warnings the policies give now (recorded), and a cost
        that differs from the one the approval request showed (the catalog's prices changed)."""
        if judgement.verdict.warnings:
            earlier = [PolicyMessage.model_validate(w) for w in job.warnings]
            known = {(m.policy, m.message) for m in earlier}  # a policy applied again keeps its old warning once
            job.warn(PolicyWarned(job_id=str(job.id), warnings=earlier + [m for m in self._recorded(judgement, job.tenant)
                                                                           if (m.policy, m.message) not in known]))
        out = [f"{w['message']} (policy {w['policy']})" for w in job.warnings]
        return out + [f"{c}; the policies allowed it at that cost" for c in self.changes(job, judgement, by, warnings=False)]

    def changes(self, job: Job, judgement: Judgement, by: str, warnings: bool = True) -> list[str]:
        """What differs now from what the approval request showed `by`: the cost as `by` is shown
        it (`shown_cost`: a price `by` may not read moving changes nothing it is told, decision
        42), a new warning (as the job records it: compared with the job's record)."""
        known = {(w["policy"], w["message"]) for w in job.warnings}
        out = [f"{w.message} (policy {w.policy}; new since the request)" for w in self._recorded(judgement, job.tenant)
               if warnings and (w.policy, w.message) not in known]
        asked = (job.approval or {}).get("cost")
        if not asked:
            return out
        hidden = self.hidden(by, job.tenant)
        target = {n.id: n.hardwaretype for n in ([] if job.operation == "delete" else job.nodes)}
        previous = [n.hardwaretype for n in job.previous_nodes]
        then, now = (masked(c, hidden, target, previous) for c in (asked, judgement.cost.model_dump(mode="json")))
        if rate(then["per_hour"]) != rate(now["per_hour"]):
            unread = sorted({h for h in [*target.values(), *previous] if hidden(h)})
            out.append(f"it costs {rate(now['per_hour'])}/h at the catalog's prices now ({rate(then['per_hour'])}/h when it was "
                       "requested)" + (f", without the prices of {', '.join(unread)}, which {by} is not shown (`read` on "
                                       "catalog:hardwaretypes/<name>)" if unread else ""))
        return out

    def record(self, job: Job, cluster: Cluster, judgement: Judgement, layout: Layout | None, digest: str) -> None:
        """What the job carries of the judgement: warnings, and the wait for an approver (each a
        mark in the job's trace: admission saves them itself, not through `Execution.execute`)."""
        told: list[Any] = []
        if judgement.verdict.warnings:
            told.append(PolicyWarned(job_id=str(job.id), warnings=self._recorded(judgement, job.tenant)))
            job.warn(told[-1])
        wait = judgement.wait
        if wait is not None:
            told.append(JobApprovalRequested(
                job_id=str(job.id), rules=list(wait.rules), expires_at=wait.expires_at, allow_self_approval=wait.allow_self_approval,
                cluster_version=cluster.version, digest=digest, cost=judgement.cost, layout=layout))
            job.await_approval(told[-1])
        traces.marks(job, told)

    def notes(self, rules: Rules, facts: Facts, before: Cluster | None, by: str) -> Any:
        """A dry run's cost, and what the policies and approval rules would say of it, for the
        requester `by` (the subject's principal, as the real request is judged)."""
        async def notes(cluster: Cluster, preview: Any) -> dict[str, Any]:
            judgement = await self.judge(rules, facts, by, before, cluster, preview.target,
                                         [t.action.value for t in preview.plan.tasks])
            return self.shown(judgement, facts, by, before, cluster, preview)

        return notes

    def shown(self, judgement: Judgement, facts: Facts, by: str, before: Cluster | None, cluster: Cluster,
              preview: Any) -> dict[str, Any]:
        """A judgement's cost and policy notes as `by` (`facts.principal`) is shown them. The
        policies judge the whole input; the answer shows only what `by` may read, as `GET /v1/cost`
        does: prices of the hardware types it may read, the tenant's totals only with read on
        every cluster, and a policy's message only when `by` may read what that policy read."""
        wait = judgement.wait
        target = [] if facts.operation == "delete" else preview.target  # (as `judge`: a delete leaves nothing)
        cost = shown_cost(judgement.cost, self.hidden(facts.principal, facts.tenant), target, before)
        deny, warn = self.said(judgement, facts.tenant, facts.principal, by)
        return {"cost": cost.model_dump(mode="json"), "policy": {
            "deny": deny, "warn": warn, "approval": list(wait.rules) if wait is not None else [],
            "input": shown_input(judgement.input, cost, self.totals_reader(facts.principal, facts.tenant))}}

    @staticmethod
    def warnings(job: Job) -> list[str]:
        """What an accepted request's answer says of governance."""
        out = [f"{w['message']} (policy {w['policy']})" for w in job.warnings]
        if job.awaiting_approval and job.approval is not None:
            out.append(f"waits for approval (rules {', '.join(job.approval['rules'])}) until {shown_time(job.approval['expires_at'])}: "
                       f"`muster job approve {job.id}` or `muster job reject {job.id}` by a principal with `approve`")
            if job.relayouts:  # docs/governance.md, "Another layout needs another approval"
                out.append(f"relayout {job.relayouts} is off for this job: another layout would be a plan nobody approved; "
                           "if it fails and rolls back, ask again")
        return out

    def decision(self, job: Job, cmd: Any, by: str) -> str:
        """Why `by` may not decide now ('' = it may); its `approve` permission is checked before."""
        a = job.approval or {}
        expires = datetime.fromisoformat(a["expires_at"]) if a.get("expires_at") else None
        return approvals.refusal(approving=isinstance(cmd, ApproveJob), waiting=job.awaiting_approval,
                                 decided_by=a.get("by") if a.get("decision") else None, expires_at=expires,
                                 allow_self=bool(a.get("allow_self_approval")), requester=job.requested_by, approver=by,
                                 now=self.clock.now(), job_id=str(job.id))

    def unchanged(self, job: Job, cluster: Cluster, digest: str) -> str:
        """Why the approved plan cannot run as approved ('' = it can)."""
        a = job.approval or {}
        if cluster.version != a.get("cluster_version"):
            return (f"cluster {cluster.name} changed since the plan was approved (version {a.get('cluster_version')}, now "
                    f"{cluster.version}): refused, not planned again; ask again")
        if digest != a.get("digest"):
            return "the plan would not run as it was approved (it derives differently now): refused; ask again"
        return ""


def shown_cost(cost: PlanCost, hidden: Hidden, target: list[Any], before: Cluster | None) -> PlanCost:
    """`cost` (of a cluster once done as `target`, from `before`) as a reader is shown it: by
    `priced.masked`, the one rule by which the tracker shows a job's recorded cost too (decision 42)."""
    previous = [n.hardwaretype for n in before.nodes.values()] if before is not None else []
    shown = masked(cost.model_dump(mode="json"), hidden, {n.id: n.hardwaretype for n in target}, previous)
    return cost if shown == cost.model_dump(mode="json") else PlanCost.model_validate(shown)


def shown_input(doc: dict[str, Any], cost: PlanCost, totals: bool) -> dict[str, Any]:
    """The policies' input as the requester is shown it: its cost as `shown_cost`, and the
    tenant's totals (every cluster's count, nodes and price) null without read on them."""
    shown = {**doc, "cost": cost.model_dump(mode="json", exclude={"per_node"})}
    if not totals:
        shown["tenant"] = {**doc["tenant"], "clusters": None, "nodes": None, "per_hour": None}
    return shown


def digest_of(job: Job, preview: Any) -> str:
    return plan_digest(job.operation, preview.plan, preview.target)
