"""The contracts as an AsyncAPI 3.0 document, generated from the pydantic models.

    python -m contracts.asyncapi > docs/asyncapi.json      (or: make contracts)

Every subject (channel), message and field: operation requests and their replies, events of
the log with their headers, task messages, queries. Schemas are JSON Schema (draft-07, the
AsyncAPI default) in `components.schemas`; every command message carries an example that a
client in any language can send as it is. `tests/unit/client/test_asyncapi.py` fails when the
checked-in document differs from what this module generates.

Imports pydantic and the stdlib only, like the rest of `contracts`.
"""

from __future__ import annotations

import json
import sys
from importlib import metadata
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from . import catalog_requests, commands, events, identity, pool_commands, pools, steps, subjects, tasks

SCHEMA_REF = "#/components/schemas/{model}"

EVENT_HEADERS: dict[str, Any] = {
    "type": "object",
    "description": "Headers of every message in the EVENTS stream (the body is the event alone).",
    "properties": {
        "Muster-Type": {"type": "string", "description": "the event's `type` (routing without parsing the body)"},
        "Muster-Aggregate": {"type": "string", "description": "the aggregate's id (cluster, job...), when it has one"},
        "Muster-Version": {"type": "string", "description": "the aggregate's (or catalog entity's) version after this event, as a decimal"},
        "Muster-Time": {"type": "string", "format": "date-time", "description": "when the fact was decided (ISO 8601)"},
        "Nats-Msg-Id": {"type": "string", "description": "idempotency key: a retried append is stored once"},
        "Nats-Expected-Last-Subject-Sequence": {
            "type": "string", "description": "optimistic concurrency: the writer's last seen sequence of this subject"},
    },
    "required": ["Muster-Type", "Nats-Msg-Id", "Muster-Time"],
}

# Channels of the log, by aggregate: (channel id, address, parameters, description).
EVENT_CHANNELS: list[tuple[str, str, dict[str, str], str]] = [
    ("events.job", "muster.evt.{tenant}.job.{jobId}", {"jobId": "the job's id (a UUID)"},
     "A job's own story, written by the planner that owns it: request, plan, queued and completed tasks, "
     "control (pause, resume, cancel, retry), rollback, and the end."),
    ("events.claims", "muster.evt.{tenant}.job.{jobId}.claims.{round}",
     {"jobId": "the job's id", "round": "how many cancels the job had before this one"},
     "A cancel's fence (`ClaimsClosed`, written once by the planner: decision 46): a forward attempt's claim is "
     "appended only while nothing is stored on its task message's `fence` subject, so none is claimed after it."),
    ("events.steps", "muster.evt.{tenant}.job.{jobId}.steps.{taskId}.{attempt}",
     {"jobId": "the job's id", "taskId": "`<node>.<action>[.<service>]` with every `.` written as `~`",
      "attempt": "the attempt"},
     "An attempt the planner ended with no outcome (`StepClosed`: a segment's follower ended unrun, decision 58; "
     "an attempt timed out, decision 59): a claim of the attempt is stored only in one batch with a message "
     "expecting nothing stored here (the step before's outcome, or a `StepOpened`)."),
    ("events.stepopened", "muster.evt.{tenant}.job.{jobId}.steps.{taskId}.{attempt}.{provisionerId}",
     {"jobId": "the job's id", "taskId": "`<node>.<action>[.<service>]` with every `.` written as `~`",
      "attempt": "the attempt claimed", "provisionerId": "the claiming provisioner"},
     "A claim's marker (`StepOpened`, written by a provisioner in one batch with a claim that has no step outcome "
     "before it: decision 59): stored only while the attempt's `StepClosed` subject is empty, so an attempt the "
     "planner ended is never claimed after."),
    ("events.layout", "muster.evt.{tenant}.layout.{jobId}", {"jobId": "the job's id"},
     "Layout requests of a job (planner) and their answers (a solver)."),
    ("events.task", "muster.evt.{tenant}.task.{jobId}.{taskId}.{provisionerId}",
     {"jobId": "the job's id", "taskId": "`<node>.<action>[.<service>]` with every `.` written as `~`",
      "provisionerId": "the provisioner that wrote the event (with auth on, the only one allowed to)"},
     "Claims and outcomes of one task's attempts, written by provisioners."),
    ("events.taskprogress", "muster.evt.{tenant}.task.{jobId}.{taskId}.{provisionerId}.progress",
     {"jobId": "the job's id", "taskId": "`<node>.<action>[.<service>]` with every `.` written as `~`",
      "provisionerId": "the provisioner running the attempt"},
     "Lines of a running attempt's output (`TaskProgressed`), reported by its plugin as it runs; a bounded "
     "number per attempt, secrets masked. Not on the planner's consumer (its filter stops one token short)."),
    ("events.cluster", "muster.evt.{tenant}.cluster.{clusterId}", {"clusterId": "the cluster's id (a UUID)"},
     "A cluster's layout, config, node results and status, written by the planner."),
    ("events.clustername", "muster.evt.{tenant}.clustername.{name}", {"name": "a cluster name"},
     "Who holds a cluster name in the tenant (`ClusterNameClaimed`, written by the planner when it accepts a create; "
     "names are unique among clusters not deleted)."),
    ("events.catalog", "muster.evt.{tenant}.catalog.{kind}.{name}",
     {"kind": "providers, hardwaretypes, imagetypes, services, clustertemplates or partialtemplates",
      "name": "the entity's name"},
     "One `CatalogEntityPut` per version of a catalog entity (`muster catalog apply`)."),
    ("events.pool", "muster.evt._system.pool.{pool}", {"pool": "the pool's name"},
     "A resource pool, written only by a pool service (one writer, expected-sequence fencing): hosts added, "
     "frozen as ambiguous, resolved, removed, reset; requests accepted or refused; every grant, confirmation, "
     "release, failure, cancel, expiry and callback. No tenant: pools are shared by tenants (docs/pools.md)."),
    ("events.poolreq", "muster.evt.{tenant}.poolreq.{pool}.{requestId}",
     {"pool": "the pool's name", "requestId": "the requester's id for the request (the planner uses the job id)"},
     "What one requester asked of a pool and reported back; the pool service follows these and decides."),
    ("events.plan", "muster.evt.{tenant}.plan.{planId}", {"planId": "the saved plan's id"},
     "A plan a dry run showed (`PlanSaved`), which `ApplyPlan` runs exactly or refuses."),
    ("events.identity", "muster.evt._auth.{aggregate}.{id}",
     {"aggregate": "`tenant`, `principal` or `token`", "id": "the tenant's name, the principal's or the token's id"},
     "Tenants, principals, tokens (a salt and a digest, never the token) and grants, written by the auth service "
     "(docs/security.md)."),
    ("events.gov", "muster.evt.{tenant}.gov.{kind}.{name}",
     {"kind": "`rule`, `policy`, `subscription` or `schedule`", "name": "the entity's name"},
     "Governance entities (docs/governance.md), written by the governance service: one `GovernancePut` per version, "
     "`GovernanceDeleted`; a schedule's ticks (`ScheduleFired`, fenced: one taker per tick) and their answers."),
    ("events.denied", "muster.evt.{tenant}.denied.{jobId}", {"jobId": "the job the request would have made"},
     "A request the tenant's policies refused (`RequestDenied`, written by the planner at admission, or at its job's approval: decision 42)."),
    ("events.notify", "muster.evt.{tenant}.notify.{subscription}", {"subscription": "the subscription's name"},
     "What the notifier owes a subscription (`NotificationQueued`) and every attempt to deliver it."),
    ("events.other", "muster.evt.{tenant}.{aggregate}.{id}", {"aggregate": "the aggregate kind", "id": "its id"},
     "Events of aggregates not listed above."),
]

TASK_CHANNEL_EVENTS = {"TaskClaimed", "TaskSucceeded", "TaskFailed"}
IDENTITY_CHANNEL_EVENTS = {_cls.model_fields["type"].default for _cls in identity.IDENTITY_EVENTS}


POOL_REQUEST_EVENTS = {"PoolHostsRequested", "PoolRequestCancelled", "PoolNodesReported", "PoolDynamicHostCreated",
                       "PoolRequestClosed"}
POOL_EVENTS = {m.model_fields["type"].default for m in pools.POOL_EVENTS} - POOL_REQUEST_EVENTS


GOVERNANCE_EVENTS = {"GovernancePut", "GovernanceDeleted", "ScheduleFired", "ScheduleAnswered"}


def event_channel(event_type: str) -> str:
    """Which channel of the log an event type is written to."""
    if event_type in GOVERNANCE_EVENTS:
        return "events.gov"
    if event_type == "RequestDenied":
        return "events.denied"
    if event_type.startswith("Notification"):
        return "events.notify"
    if event_type == "PolicyWarned":
        return "events.job"
    if event_type in POOL_REQUEST_EVENTS:
        return "events.poolreq"
    if event_type in POOL_EVENTS:
        return "events.pool"
    if event_type in TASK_CHANNEL_EVENTS:
        return "events.task"
    if event_type == "TaskProgressed":
        return "events.taskprogress"
    if event_type in IDENTITY_CHANNEL_EVENTS:
        return "events.identity"
    if event_type == "ClaimsClosed":
        return "events.claims"
    if event_type == "StepClosed":
        return "events.steps"
    if event_type == "StepOpened":
        return "events.stepopened"
    if event_type == "ClusterNameClaimed":
        return "events.clustername"
    if event_type.startswith("Layout"):
        return "events.layout"
    if event_type.startswith(("Job", "Task", "Rollback", "Cleanup")):
        return "events.job"
    if event_type.startswith(("Cluster", "Node", "Service")):
        return "events.cluster"
    if event_type.startswith("Catalog"):
        return "events.catalog"
    if event_type.startswith("Plan"):
        return "events.plan"
    return "events.other"


COMMAND_EXAMPLES: dict[str, dict[str, Any]] = {
    "CreateCluster": {"name": "hadoop-dev", "template": "hadoop-small", "nodes": 5},
    "DeleteCluster": {"cluster_id": "3f1c1b9e-7f43-5d8e-9d3e-0c9a1f0b6d2a"},
    "ExpandCluster": {"cluster_id": "3f1c1b9e-7f43-5d8e-9d3e-0c9a1f0b6d2a", "nodes": 8},
    "ShrinkCluster": {"cluster_id": "3f1c1b9e-7f43-5d8e-9d3e-0c9a1f0b6d2a", "nodes": 3},
    "AddServices": {"cluster_id": "3f1c1b9e-7f43-5d8e-9d3e-0c9a1f0b6d2a", "services": ["hbase-master"]},
    "RemoveServices": {"cluster_id": "3f1c1b9e-7f43-5d8e-9d3e-0c9a1f0b6d2a", "services": ["yarn-nodemanager"]},
    "ConfigureCluster": {"cluster_id": "3f1c1b9e-7f43-5d8e-9d3e-0c9a1f0b6d2a", "config": {"hdfs": {"replication": 3}}, "restart": True},
    "StartServices": {"cluster_id": "3f1c1b9e-7f43-5d8e-9d3e-0c9a1f0b6d2a", "services": ["hdfs-namenode"]},
    "StopServices": {"cluster_id": "3f1c1b9e-7f43-5d8e-9d3e-0c9a1f0b6d2a"},
    "RestartServices": {"cluster_id": "3f1c1b9e-7f43-5d8e-9d3e-0c9a1f0b6d2a", "services": ["zookeeper-server"]},
    "UpgradeService": {"cluster_id": "3f1c1b9e-7f43-5d8e-9d3e-0c9a1f0b6d2a", "service": "hdfs-datanode"},
    "RollbackCluster": {"cluster_id": "3f1c1b9e-7f43-5d8e-9d3e-0c9a1f0b6d2a", "to_job": "6b0d4c3e-1f2a-5b7c-8d9e-0a1b2c3d4e5f"},
    "PauseJob": {"job_id": "6b0d4c3e-1f2a-5b7c-8d9e-0a1b2c3d4e5f"},
    "ResumeJob": {"job_id": "6b0d4c3e-1f2a-5b7c-8d9e-0a1b2c3d4e5f"},
    "CancelJob": {"job_id": "6b0d4c3e-1f2a-5b7c-8d9e-0a1b2c3d4e5f"},
    "RetryJob": {"job_id": "6b0d4c3e-1f2a-5b7c-8d9e-0a1b2c3d4e5f"},
    "ApproveJob": {"job_id": "6b0d4c3e-1f2a-5b7c-8d9e-0a1b2c3d4e5f", "comment": "reviewed the plan"},
    "RejectJob": {"job_id": "6b0d4c3e-1f2a-5b7c-8d9e-0a1b2c3d4e5f", "comment": "not during the freeze"},
    "ApplyPlan": {"plan_id": "5c7467a9d901dc6e81e6"},
    "CheckCluster": {"cluster_id": "3f1c1b9e-7f43-5d8e-9d3e-0c9a1f0b6d2a"},
    "RepairCluster": {"cluster_id": "3f1c1b9e-7f43-5d8e-9d3e-0c9a1f0b6d2a"},
    "ExtendLease": {"cluster_id": "3f1c1b9e-7f43-5d8e-9d3e-0c9a1f0b6d2a", "by_s": 86400},
}


def _union_members(adapter_type: Any) -> list[type[BaseModel]]:
    """The models of an `Annotated[Union[...], Field(discriminator=...)]`."""
    union = adapter_type.__origin__ if hasattr(adapter_type, "__metadata__") else adapter_type
    return list(union.__args__)


def _draft07(node: Any) -> Any:
    """pydantic writes JSON Schema 2020-12; AsyncAPI's default schema format is draft-07."""
    if isinstance(node, list):
        return [_draft07(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _draft07(v) for k, v in node.items()}
    if "prefixItems" in out:  # a tuple: draft-07 writes positional items as an array
        out["items"] = out.pop("prefixItems")
        out.setdefault("minItems", len(out["items"]))
        out["additionalItems"] = False
    if isinstance(out.get("discriminator"), dict):  # OpenAPI style -> AsyncAPI's property name
        out["discriminator"] = out["discriminator"]["propertyName"]
    return out


def _schemas(models: list[type[BaseModel]]) -> dict[str, Any]:
    _, top = models_json_schema([(m, "validation") for m in models], ref_template=SCHEMA_REF)
    defs = top.get("$defs", {})
    return {name: _draft07(schema) for name, schema in sorted(defs.items())}


def _type_of(model: type[BaseModel]) -> str:
    return str(model.model_fields["type"].default)


def _message(model: type[BaseModel], summary: str, **extra: Any) -> dict[str, Any]:
    name = _type_of(model) if "type" in model.model_fields else model.__name__
    doc = (model.__doc__ or "").strip()
    message = {"name": name, "title": name, "summary": summary, "contentType": "application/json",
               "payload": {"$ref": SCHEMA_REF.format(model=model.__name__)}}
    if doc and not doc.startswith(("Usage docs", "A base class")):
        message["description"] = " ".join(doc.split())
    message.update(extra)
    return message


PRINCIPAL = {"principal": "the sender's principal id: with auth on, the server lets a connection use only its own"}


def _params(names: dict[str, str], tenant: bool = True) -> dict[str, Any]:
    first = {"tenant": {"description": "the tenant (1-128 letters, digits, '-' or '_')"}} if tenant else {}
    return {**first, **{k: {"description": v} for k, v in names.items()}}


def build() -> dict[str, Any]:
    command_models = _union_members(commands.AnyCommand)
    reply_models = _union_members(commands.Reply)
    event_models = _union_members(events.AnyEvent)
    pool_command_models = _union_members(pool_commands.AnyPoolCommand)
    schemas = _schemas([*command_models, *reply_models, *event_models, tasks.TaskMessage, steps.StepOutcomesQuery,
                        steps.StepOutcomes, identity.AuthRequest, identity.AuthReply,
                        *pool_command_models, pool_commands.PoolAnswer, catalog_requests.ApplyCatalog,
                        catalog_requests.DeleteCatalogEntity, catalog_requests.CatalogAnswer])
    messages: dict[str, Any] = {}
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}

    # -- operations: request/reply ---------------------------------------------------------
    for model in reply_models:
        messages[_type_of(model)] = _message(model, "The planner's answer to an operation request.")
    channels["operations.reply"] = {
        "address": None,
        "description": "The requester's reply subject (a NATS inbox): one `Accepted`, `Rejected`, `DryRun` or `LeaseExtended` (for `extend-lease`) per request.",
        "messages": {_type_of(m): {"$ref": f"#/components/messages/{_type_of(m)}"} for m in reply_models},
    }
    for model in command_models:
        t = _type_of(model)
        verb = commands.VERB_OF[t]
        example = {"type": t, **COMMAND_EXAMPLES[t], "request_id": f"example-{verb}-1", "requested_by": "alice"}
        model.model_validate(example)  # an example that does not validate must never be published
        messages[t] = _message(model, f"Request the `{verb}` operation.",
                               examples=[{"name": f"{verb}-example", "payload": example}])
        cid = f"operations.{verb}"
        channels[cid] = {
            "address": f"{subjects.OPS}.{{tenant}}.{{principal}}.{verb}",
            "title": f"{verb} requests",
            "description": (f"Core NATS request/reply (queue group `planners`). Send one `{t}` as JSON; the reply "
                            "comes at once. `request_id` is the idempotency key: resending with the same key "
                            "(after a timeout) answers with the same job, `duplicate: true`. The reply goes to "
                            "the sender's inbox, `_INBOX.<principal>.>`."),
            "parameters": _params(PRINCIPAL),
            "messages": {t: {"$ref": f"#/components/messages/{t}"}},
        }
        operations[f"request.{verb}"] = {
            "action": "send",
            "channel": {"$ref": f"#/channels/{cid}"},
            "summary": f"Ask for `{verb}`; the answer is Accepted (job id), Rejected (reason) or DryRun (layout and plan).",
            "messages": [{"$ref": f"#/channels/{cid}/messages/{t}"}],
            "reply": {
                "channel": {"$ref": "#/channels/operations.reply"},
                "messages": [{"$ref": f"#/channels/operations.reply/messages/{_type_of(m)}"} for m in reply_models],
            },
        }

    # -- the log ---------------------------------------------------------------------------------
    by_channel: dict[str, list[str]] = {}
    for model in event_models:
        t = _type_of(model)
        messages[t] = _message(model, f"Event `{t}` (a fact, past tense).", headers={"$ref": "#/components/schemas/EventHeaders"})
        by_channel.setdefault(event_channel(t), []).append(t)
    schemas["EventHeaders"] = EVENT_HEADERS
    for cid, address, params, description in EVENT_CHANNELS:
        names = by_channel.get(cid, [])
        if not names and cid != "events.other":
            continue
        channels[cid] = {
            "address": address,
            "description": f"{description} Stream `{subjects.EVENTS_STREAM}` (the log; never expires). "
                           "Read with a JetStream consumer filtered on the subject (ordered consumer to follow).",
            "parameters": _params(params, tenant="{tenant}" in address),
            "messages": {n: {"$ref": f"#/components/messages/{n}"} for n in names},
        }
        if not names:
            continue
        operations[f"receive.{cid}"] = {
            "action": "receive",
            "channel": {"$ref": f"#/channels/{cid}"},
            "messages": [{"$ref": f"#/channels/{cid}/messages/{n}"} for n in names],
        }

    # -- tasks and queries -------------------------------------------------------------------------
    messages["Task"] = _message(tasks.TaskMessage, "One attempt of one node task, for a provisioner worker.",
                                headers={"type": "object", "properties": {"Nats-Msg-Id": {
                                    "type": "string", "description": "`<job>.<task>.<attempt>`: a re-publish is stored once"}}})
    channels["tasks"] = {
        "address": f"{subjects.TASK}.{{tenant}}.{{provisionerClass}}",
        "description": (f"Stream `{subjects.TASKS_STREAM}` (work queue): one message per task attempt; workers of a "
                        "class share one durable consumer `workers-<tenant>-<class>`."),
        "parameters": _params({"provisionerClass": "the provisioner class (default `default`)"}),
        "messages": {"Task": {"$ref": "#/components/messages/Task"}},
    }
    operations["receive.tasks"] = {"action": "receive", "channel": {"$ref": "#/channels/tasks"},
                                   "messages": [{"$ref": "#/channels/tasks/messages/Task"}]}
    messages["JobQuery"] = {"name": "JobQuery", "summary": "An empty request for a job's status.",
                            "payload": {"type": "string", "maxLength": 0}}
    messages["JobView"] = {"name": "JobView", "contentType": "application/json",
                           "summary": "The job as its owning planner sees it (state, counts, stage, tasks).",
                           "payload": {"type": "object", "additionalProperties": True}}
    channels["queries.job"] = {
        "address": f"{subjects.QUERY}.{{tenant}}.{{principal}}.job.{{jobId}}",
        "description": "Request/reply: answered only by the planner that owns the job; no answer means ask the log.",
        "parameters": _params({**PRINCIPAL, "jobId": "the job's id"}),
        "messages": {"JobQuery": {"$ref": "#/components/messages/JobQuery"}},
    }
    channels["queries.job.reply"] = {"address": None, "messages": {"JobView": {"$ref": "#/components/messages/JobView"}}}
    operations["request.job-status"] = {
        "action": "send", "channel": {"$ref": "#/channels/queries.job"},
        "messages": [{"$ref": "#/channels/queries.job/messages/JobQuery"}],
        "reply": {"channel": {"$ref": "#/channels/queries.job.reply"},
                  "messages": [{"$ref": "#/channels/queries.job.reply/messages/JobView"}]},
    }
    channels["queries.solve"] = {
        "address": f"{subjects.QUERY}.{{tenant}}.{{principal}}.solve",
        "description": "Request/reply to any solver (queue group `solvers`) for dry runs: a `LayoutRequested` in, "
                       "a `LayoutSolved` or `LayoutUnsolvable` out; nothing is recorded.",
        "parameters": _params(PRINCIPAL),
        "messages": {"LayoutRequested": {"$ref": "#/components/messages/LayoutRequested"}},
    }
    channels["queries.solve.reply"] = {"address": None, "messages": {
        n: {"$ref": f"#/components/messages/{n}"} for n in ("LayoutSolved", "LayoutUnsolvable")}}
    operations["request.solve"] = {
        "action": "send", "channel": {"$ref": "#/channels/queries.solve"},
        "messages": [{"$ref": "#/channels/queries.solve/messages/LayoutRequested"}],
        "reply": {"channel": {"$ref": "#/channels/queries.solve.reply"},
                  "messages": [{"$ref": f"#/channels/queries.solve.reply/messages/{n}"} for n in ("LayoutSolved", "LayoutUnsolvable")]},
    }

    messages["StepOutcomesQuery"] = _message(steps.StepOutcomesQuery, "A segment's steps, by a provisioner it came to again.")
    messages["StepOutcomes"] = _message(steps.StepOutcomes, "What the log holds of them, or why not.")
    channels["queries.steps"] = {
        "address": f"{subjects.QUERY}.{{tenant}}.{{principal}}.steps",
        "description": ("Request/reply (docs/decisions/0058): answered only by the planner acting for the job, to a "
                        "provisioner granted the job's queue, about the job's current attempts queued as one segment; "
                        "no answer means ask again later."),
        "parameters": _params(PRINCIPAL),
        "messages": {"StepOutcomesQuery": {"$ref": "#/components/messages/StepOutcomesQuery"}},
    }
    channels["queries.steps.reply"] = {"address": None, "messages": {"StepOutcomes": {"$ref": "#/components/messages/StepOutcomes"}}}
    operations["request.steps"] = {
        "action": "send", "channel": {"$ref": "#/channels/queries.steps"},
        "messages": [{"$ref": "#/channels/queries.steps/messages/StepOutcomesQuery"}],
        "reply": {"channel": {"$ref": "#/channels/queries.steps.reply"},
                  "messages": [{"$ref": "#/channels/queries.steps.reply/messages/StepOutcomes"}]},
    }

    # -- identities ------------------------------------------------------------------------------
    messages["AuthRequest"] = _message(identity.AuthRequest, "A request to the auth service; the verb is the subject's last token.")
    messages["AuthReply"] = _message(identity.AuthReply, "The auth service's answer: ok with data, or a reason.")
    channels["auth"] = {
        "address": f"{subjects.AUTH}.{{principal}}.{{verb}}",
        "description": "Request/reply to the auth service (docs/security.md): " + ", ".join(identity.AUTH_VERBS) + ". "
                       "The requester is the subject's principal.",
        "parameters": _params({**PRINCIPAL, "verb": "one of " + ", ".join(identity.AUTH_VERBS)}, tenant=False),
        "messages": {"AuthRequest": {"$ref": "#/components/messages/AuthRequest"}},
    }
    channels["auth.reply"] = {"address": None, "messages": {"AuthReply": {"$ref": "#/components/messages/AuthReply"}}}
    operations["request.auth"] = {
        "action": "send", "channel": {"$ref": "#/channels/auth"},
        "messages": [{"$ref": "#/channels/auth/messages/AuthRequest"}],
        "reply": {"channel": {"$ref": "#/channels/auth.reply"}, "messages": [{"$ref": "#/channels/auth.reply/messages/AuthReply"}]},
    }
    _pool_channels(pool_command_models, messages, channels, operations)
    _catalog_channels(messages, channels, operations)

    metrics = getattr(subjects, "PLANNER_METRICS", None)
    if metrics:
        messages["MetricsQuery"] = {"name": "MetricsQuery", "summary": "An empty request for queue metrics.",
                                    "payload": {"type": "string", "maxLength": 0}}
        messages["PlannerMetrics"] = {"name": "PlannerMetrics", "contentType": "application/json",
                                      "summary": "One planner's queue metrics: a list, one entry per tenant and provisioner class.",
                                      "payload": {"type": "array", "items": {"type": "object", "additionalProperties": True}}}
        channels["metrics.planner"] = {
            "address": metrics,
            "description": "Request/reply: every planner answers; collect all replies until the timeout.",
            "messages": {"MetricsQuery": {"$ref": "#/components/messages/MetricsQuery"}},
        }
        channels["metrics.planner.reply"] = {"address": None, "messages": {
            "PlannerMetrics": {"$ref": "#/components/messages/PlannerMetrics"}}}
        operations["request.planner-metrics"] = {
            "action": "send", "channel": {"$ref": "#/channels/metrics.planner"},
            "messages": [{"$ref": "#/channels/metrics.planner/messages/MetricsQuery"}],
            "reply": {"channel": {"$ref": "#/channels/metrics.planner.reply"},
                      "messages": [{"$ref": "#/channels/metrics.planner.reply/messages/PlannerMetrics"}]},
        }

    try:
        version = metadata.version("muster")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        version = "0.0.0"
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "muster",
            "version": version,
            "description": (
                "The wire of muster, an event-sourced cluster manager on NATS JetStream. Bodies are JSON (UTF-8). "
                "To run an operation: publish a command to `muster.ops.<tenant>.<principal>.<verb>` as a NATS request and read the "
                "one reply (`Accepted` with the job id, `Rejected` with a reason, or `DryRun`). Then follow the job "
                "on the log: subscribe with a JetStream ordered consumer on `muster.evt.<tenant>.job.<jobId>` from the "
                "first message; the job ends with JobSucceeded, JobFailed, JobRolledBack or JobNeedsAttention. "
                "Every message has `type` (its name) and `v` (its schema version); old versions are upcast on "
                "read, never rewritten. Generated from `contracts/` by `python -m contracts.asyncapi`."),
        },
        "defaultContentType": "application/json",
        "servers": {
            "muster-up": {
                "host": "127.0.0.1:{port}", "protocol": "nats",
                "description": (
                    "The embedded server of `muster up` / `muster demo`: loopback, on a free port chosen at each "
                    "start (not 4222). `muster up` prints the URL and how another shell finds it, and saves it in "
                    "`<data-dir>/nats.url` (data dir `.muster` unless `--data-dir` or `$MUSTER_DATA_DIR` says "
                    "otherwise). From another shell: `export MUSTER_DATA_DIR=/abs/path/.muster` (the muster CLI "
                    "reads nats.url there), or `export NATS_URL=$(cat /abs/path/.muster/nats.url)` (any NATS client)."
                ),
                "variables": {"port": {"description": "the port `muster up` chose: the end of `<data-dir>/nats.url`"}},
            },
            "standalone": {
                "host": "127.0.0.1:4222", "protocol": "nats",
                "description": "A nats-server you run yourself: the services and the CLI use `$NATS_URL`, else this.",
            },
        },
        "channels": channels,
        "operations": operations,
        "components": {"schemas": schemas, "messages": dict(sorted(messages.items()))},
    }


def _send(channel: str, message: str, reply: str, replies: tuple[str, ...]) -> dict[str, Any]:
    """A request on `channel` answered on `reply` by one of `replies`."""
    return {"action": "send", "channel": {"$ref": f"#/channels/{channel}"},
            "messages": [{"$ref": f"#/channels/{channel}/messages/{message}"}],
            "reply": {"channel": {"$ref": f"#/channels/{reply}"},
                      "messages": [{"$ref": f"#/channels/{reply}/messages/{n}"} for n in replies]}}


def _catalog_channels(messages: dict[str, Any], channels: dict[str, Any], operations: dict[str, Any]) -> None:
    """Catalog changes asked of a planner (contracts/catalog_requests.py, docs/security.md)."""
    messages["CatalogAnswer"] = _message(catalog_requests.CatalogAnswer, "A planner's answer to a catalog change.")
    channels["catalog.reply"] = {"address": None, "description": "One `CatalogAnswer` or `Rejected` per request.",
                                 "messages": {n: {"$ref": f"#/components/messages/{n}"} for n in ("CatalogAnswer", "Rejected")}}
    for model in (catalog_requests.ApplyCatalog, catalog_requests.DeleteCatalogEntity):
        t = _type_of(model)
        verb = catalog_requests.VERB_OF[t]
        messages[t] = _message(model, f"Ask a planner for `{verb}`.")
        channels[verb] = {
            "address": f"{subjects.OPS}.{{tenant}}.{{principal}}.{verb}",
            "description": f"Core NATS request/reply to any planner (queue group `planners`): one `{t}`, one answer. The planner "
                           "checks `write` on each entity changed (`catalog:<kind>/<name>`, `catalog:*` or the tenant) and "
                           "records the principal as `by`.",
            "parameters": _params(PRINCIPAL),
            "messages": {t: {"$ref": f"#/components/messages/{t}"}},
        }
        operations[f"request.{verb}"] = _send(verb, t, "catalog.reply", ("CatalogAnswer", "Rejected"))


def _pool_channels(models: list[type[BaseModel]], messages: dict[str, Any], channels: dict[str, Any],
                   operations: dict[str, Any]) -> None:
    """Commands to pool services (docs/pools.md): request/reply, queue group `pools`."""
    messages["PoolAnswer"] = _message(pool_commands.PoolAnswer, "A pool service's answer to a command.")
    channels["pools.reply"] = {"address": None, "description": "One `PoolAnswer` or `Rejected` per command.",
                               "messages": {n: {"$ref": f"#/components/messages/{n}"} for n in ("PoolAnswer", "Rejected")}}
    for model in models:
        t = _type_of(model)
        verb = pool_commands.VERB_OF[t]
        messages[t] = _message(model, f"Pool command `{verb}`.")
        cid = f"pools.{verb}"
        channels[cid] = {
            "address": f"{subjects.POOL}.{{principal}}.{{pool}}.{verb}",
            "description": f"Core NATS request/reply to any pool service (queue group `pools`): one `{t}`, one answer. "
                           "With auth on only super admins (and the system identity) may send pool commands.",
            "parameters": _params({**PRINCIPAL, "pool": "the pool's name"}, tenant=False),
            "messages": {t: {"$ref": f"#/components/messages/{t}"}},
        }
        operations[f"pool.{verb}"] = _send(cid, t, "pools.reply", ("PoolAnswer", "Rejected"))
    messages["PoolList"] = {"name": "PoolList", "contentType": "application/json", "summary": "Every pool's summary.",
                            "payload": {"type": "array", "items": {"type": "object", "additionalProperties": True}}}
    channels["pools.list"] = {"address": f"{subjects.POOL_LIST}.{{principal}}", "description": "Request/reply (empty body): every pool.",
                              "parameters": _params(PRINCIPAL, tenant=False),
                              "messages": {"PoolList": {"$ref": "#/components/messages/PoolList"}}}


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
