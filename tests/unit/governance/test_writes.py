"""The governance service's writes on an in-memory log: what a put refuses (a policy that reads
what its input never has, a rule on an operation no request has), and a policy or rule deleted
and put again."""

from __future__ import annotations

from typing import Any

from contracts import subjects
from contracts.governance import GovernanceAnswer, GovernanceRequest
from contracts.identity import PrincipalCreated, TenantCreated
from muster.ports.memory import MemoryEventLog
from services.auth.domain.state import IdentityState
from services.governance.domain.references import SHAPE, unknown_inputs
from services.governance.writes import GovernanceWrites
from services.notifier.requests import NotifierRequests

CLUSTER = "0c4b7a0e-0000-4000-8000-000000000001"
LIMIT = 'package muster.limit\nimport rego.v1\n\ndeny contains "over 3" if input.nodes.after > 3\n'


async def put(writes: GovernanceWrites, kind: str, **entity: Any) -> GovernanceAnswer:
    request = GovernanceRequest(kind=kind, entities=[entity], requested_by="ada")  # type: ignore[arg-type]
    return await writes.answer("a", "anonymous", "put", request.model_dump_json().encode())


async def delete(writes: GovernanceWrites, kind: str, name: str) -> GovernanceAnswer:
    request = GovernanceRequest(kind=kind, name=name, requested_by="ada")  # type: ignore[arg-type]
    return await writes.answer("a", "anonymous", "delete", request.model_dump_json().encode())


async def test_a_policy_deleted_and_put_again_is_written_with_the_next_version() -> None:
    """The same policy put again after its delete had the id of its first put: JetStream refused
    the batch (`duplicate message id`, an internal error) within its duplicate window; and its
    version started at 1 again, so `limit v1` named two sources in RequestDenied."""
    log = MemoryEventLog()
    writes = GovernanceWrites(log)
    entities: list[tuple[str, dict[str, Any]]] = [("policy", {"name": "limit", "source": LIMIT}), ("rule", {"name": "big", "min_nodes": 20})]
    for kind, entity in entities:
        first = await put(writes, kind, **entity)
        assert first.ok and first.items[0]["version"] == 1, first
        assert (await delete(writes, kind, entity["name"])).ok
        again = await put(writes, kind, **entity)
        assert again.ok and (again.items[0]["version"], again.items[0]["action"]) == (2, "add"), again
        changed = await put(writes, kind, **{**entity, "description": "changed"})
        assert changed.ok and changed.items[0]["version"] == 3, changed
    versions = [r.event.version for r in await log.read(subjects.governance_filter("a", "policy")) if r.type == "GovernancePut"]
    assert versions == [1, 2, 3]


async def test_a_policy_that_reads_what_its_input_never_has_is_refused() -> None:
    """`input.request.node_count` is undefined on every request: the rule never holds, and the
    policy allowed everything it was written to refuse."""
    writes = GovernanceWrites(MemoryEventLog())
    typo = 'package muster.typo\nimport rego.v1\n# input.comment_only is fine\ndeny contains "big" if input.request.node_count > 3\n'
    refused = await put(writes, "policy", name="typo", source=typo)
    assert not refused.ok and refused.code == "invalid" and refused.problems == [
        "policy 'typo' reads what its input never has (undefined: a rule on it never holds): input.request.node_count: "
        "input.request has no field 'node_count' (it has " + ", ".join(sorted(SHAPE["request"])) + ")"]
    assert (await put(writes, "policy", name="limit", source=LIMIT)).ok


async def test_a_rule_on_an_operation_no_request_has_is_refused() -> None:
    writes = GovernanceWrites(MemoryEventLog())
    refused = await put(writes, "rule", name="typo", operations=["crate", "delete"])
    assert not refused.ok and len(refused.problems) == 1, refused
    assert refused.problems[0].startswith("rule 'typo': operations: 'crate' is not an operation a rule can match (add-services, ")
    assert (await put(writes, "rule", name="ok", operations=["create", "expand", "restart"])).ok


async def test_a_cluster_pattern_no_cluster_name_can_match_is_refused_and_nothing_is_written() -> None:
    """Walk of session 37: `rule add prod --cluster 'prod.*'` (a regular expression's habit), a
    Cyrillic `е` in `wеb`, markup, a NUL or an empty pattern were stored, and the rule never held:
    every request it was written to hold for ran without an approver; a subscription so written
    was never told of its clusters."""
    log = MemoryEventLog()
    writes = GovernanceWrites(log)
    cases = {"prod.*": "it has '.'", "w\u0435b": "it has U+0435 CYRILLIC SMALL LETTER IE", "<b>x</b>": "it has '<'",
             "a\x00b": "it has U+0000 (a control character)", "": "'' is empty"}
    for pattern, fault in cases.items():
        rule = await put(writes, "rule", name="prod", min_nodes=1, clusters=["web-*", pattern])
        assert not rule.ok and rule.code == "invalid" and len(rule.problems) == 1, rule
        assert rule.problems[0].startswith("rule 'prod': clusters: ") and fault in rule.problems[0], rule.problems
        assert rule.problems[0].endswith("the rule would never match"), rule.problems
        sub = await put(writes, "subscription", name="news", events=["job_failed"], subject="muster.cb.a.news", clusters=[pattern])
        assert not sub.ok and fault in sub.problems[0] and "never be told of them" in sub.problems[0], sub.problems
    assert await log.read(subjects.governance_filter("a", "rule")) == []
    # Names, ids and shell patterns of them are taken as before.
    assert (await put(writes, "rule", name="prod", clusters=["prod-*", "web_?", "db[0-9]", "[!x]*", CLUSTER])).ok
    assert (await put(writes, "subscription", name="news", events=["job_failed"], subject="muster.cb.a.news",
                      clusters=["prod-*", CLUSTER])).ok


def test_input_paths_are_checked_below_known_levels_only() -> None:
    source = """package muster.p
import rego.v1
# input.nothing in a comment, and "input.nothing" in a string, are not read
deny contains "input.nothing" if input["cluster"]["labels"]["env"] == "prod"
deny contains "x" if input.request.config.anything.below
deny contains "x" if { some g in input.layout; g.count > 1 }
deny contains "x" if input.nodes.after.count > 1
deny contains "x" if input["nodez"]
deny contains "x" if input.cost.per_hourr > 1
deny contains "x" if input.cost.per_hourr > 2
"""
    assert unknown_inputs(source) == [
        "input.nodes.after.count: input.nodes.after is a number or a string, with no fields",
        "input.nodez: input has no field 'nodez' (it has cluster, cost, layout, nodes, now, now_ns, operation, plan, request, "
        "requester, tenant)",
        "input.cost.per_hourr: input.cost has no field 'per_hourr' (it has before_by_hardware, before_per_hour, by_hardware, per_hour, unknown)"]


def test_the_shape_checked_is_the_input_document_admission_builds() -> None:
    """Every field of a real input document is known to the check, and the check knows no field
    the document lacks (a field added to one and not the other fails here)."""
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from contracts.approvals import PlanCost
    from contracts.commands import CreateCluster
    from contracts.layout import NodeSpec
    from services.governance.domain.inputs import document
    from services.planner.governance import cluster_input

    node = NodeSpec(id="n1", hardwaretype="small", imagetype="centos", services=["a"])
    cluster = SimpleNamespace(id="c1", name="w", template="t", provider="sim", status="active", nodes={"n1": node},
                              config={"labels": {"env": "prod"}}, expires_at=None, owner="uma")
    doc = document(tenant="a", operation="expand", now=datetime(2026, 1, 1, tzinfo=UTC), requester="uma", role="user",
                   request=CreateCluster(name="w", template="t", nodes=1).model_dump(mode="json"),
                   cluster=cluster_input(cluster),  # type: ignore[arg-type]
                   before=[node], after=[node], actions=["create"], cost=PlanCost(per_hour=1.0))

    def same(value: Any, shape: Any, at: str) -> None:
        if shape is None or shape == {}:  # a leaf, or a level of the user's own keys
            return
        assert isinstance(value, dict) and set(value) == set(shape), (at, sorted(value), sorted(shape))
        for key in shape:
            if key != "request":  # a command has some of the fields every operation's commands have
                same(value[key], shape[key], f"{at}.{key}")

    same(doc, SHAPE, "input")
    assert set(doc["request"]) < set(SHAPE["request"])


async def test_a_super_admin_s_governance_request_in_a_tenant_no_one_made_is_refused_as_its_reads_are() -> None:
    """`muster policy apply --tenant acmee` (a typo) wrote a policy where the tracker then said
    "no tenant 'acmee'": the same refusal as a request or a catalog write, for every verb; a made
    tenant and `default` are served."""
    log = MemoryEventLog()
    state = IdentityState()
    for seq, event in enumerate([TenantCreated(tenant="default", by="root"),
                                 PrincipalCreated(principal="root", role="super_admin", by="boot")], 1):
        state.apply(event, seq)
    writes = GovernanceWrites(log, state)
    unmade = "no tenant 'acmee' (`muster tenant list` lists them; `muster tenant create` makes one)"
    schedule = {"name": "s", "every_s": 600, "verb": "check", "command": {"type": "CheckCluster", "cluster_id": CLUSTER}}
    requests = [("put", GovernanceRequest(kind="policy", entities=[{"name": "limit", "source": LIMIT}])),
                ("put", GovernanceRequest(kind="rule", entities=[{"name": "big", "min_nodes": 20}])),
                ("put", GovernanceRequest(kind="subscription", entities=[{"name": "s", "events": ["job_failed"],
                                                                          "subject": "muster.cb.acmee.jobs"}])),
                ("put", GovernanceRequest(kind="schedule", entities=[schedule])),
                ("delete", GovernanceRequest(kind="policy", name="limit")),
                ("list", GovernanceRequest(kind="policy"))]
    for verb, request in requests:
        answer = await writes.answer("acmee", "root", verb, request.model_dump_json().encode())
        assert (answer.ok, answer.code, answer.reason) == (False, "invalid", unmade), (verb, request.kind, answer)
    assert not log.records
    assert (await writes.answer("default", "root", "put", requests[0][1].model_dump_json().encode())).ok
    state.apply(TenantCreated(tenant="acme", by="root"), 3)
    assert (await writes.answer("acme", "root", "put", requests[1][1].model_dump_json().encode())).ok


class _Msg:
    """A request as nats-py hands it over, with the answer kept."""

    def __init__(self, subject: str, data: bytes) -> None:
        self.subject, self.data, self.reply = subject, data, "_INBOX.test"
        self.answer: GovernanceAnswer | None = None

    async def respond(self, data: bytes) -> None:
        self.answer = GovernanceAnswer.model_validate_json(data)


async def test_the_notifier_refuses_a_super_admin_s_request_in_a_tenant_no_one_made_in_the_same_words() -> None:
    """`muster notify test hook --tenant acmee` was told there is no subscription 'hook' there,
    as if the tenant existed."""
    state = IdentityState()
    for seq, event in enumerate([TenantCreated(tenant="default", by="root"),
                                 PrincipalCreated(principal="root", role="super_admin", by="boot")], 1):
        state.apply(event, seq)
    requests = NotifierRequests(None, None, None, lambda: state)  # type: ignore[arg-type]  # (refused before they are used)
    for verb in ("notify-test", "notify-check"):
        msg = _Msg(subjects.governance_request("acmee", "root", verb), b'{"kind": "subscription", "name": "hook"}')
        await requests.on_request(msg)  # type: ignore[arg-type]
        assert msg.answer is not None and (msg.answer.ok, msg.answer.code, msg.answer.reason) == (
            False, "invalid", "no tenant 'acmee' (`muster tenant list` lists them; `muster tenant create` makes one)"), verb


async def test_a_schedules_command_without_its_type_is_typed_by_the_verb_or_refused_naming_the_type() -> None:
    """`PUT /v1/governance/schedules/{name}` with `{"verb": "check", "command": {"cluster_id": ...}}`
    (the verb beside the command, as the body has it) was refused "its command is not an
    operation: Unable to extract tag using discriminator 'type'": pydantic's words, naming neither
    what was missing nor what it could be."""
    from contracts.events import ClusterRequested
    from muster.ports.eventlog import Append

    log = MemoryEventLog()
    await log.append(subjects.cluster_events("a", CLUSTER), [Append(ClusterRequested(
        tenant="a", cluster_id=CLUSTER, name="web", template="t", provider="sim", job_id="j0"), msg_id="c")])
    typed = await put(log_writes := GovernanceWrites(log), "schedule", name="s", every_s=600, verb="check",
                      command={"cluster_id": CLUSTER})
    assert typed.ok, typed
    [written] = [r.event for r in await log.read(subjects.governance_filter("a", "schedule"))]
    assert written.entity["command"]["type"] == "CheckCluster"
    for verb, said in ((None, "its command has no `type`: give the command's type (CheckCluster, "),
                       ("explode", "its command has no `type` (its verb 'explode' is none of muster's): ")):
        refused = await put(log_writes, "schedule", name="t", every_s=600, command={"cluster_id": CLUSTER},
                            **({"verb": verb} if verb else {}))
        assert not refused.ok and len(refused.problems) == 1, refused
        assert refused.problems[0].startswith(f"schedule 't': {said}"), refused.problems
        assert "ExpandCluster" in refused.problems[0] and "discriminator" not in refused.problems[0]


async def test_a_schedule_whose_command_is_a_dry_run_is_refused_saying_so() -> None:
    """Over HTTP or the bus (`PUT /v1/governance/schedules/{name}`): it was refused as `its command
    is a DeleteCluster (verb 'delete'), not a run of 'delete'`, which named no problem."""
    writes = GovernanceWrites(MemoryEventLog())
    refused = await put(writes, "schedule", name="gone", every_s=600, verb="delete",
                        command={"type": "DeleteCluster", "cluster_id": CLUSTER, "dry_run": True})
    assert not refused.ok and refused.problems == [
        "schedule 'gone': its command is a dry run (`dry_run`: true), which previews and changes nothing; a schedule "
        "sends its operation for real at every tick"], refused


async def test_a_refused_pause_resume_or_delete_of_a_schedule_names_it_and_its_cluster_in_one_sentence() -> None:
    """Session 36: apo, who may not run its operation, pausing uma's schedule was told `not
    paused: schedule 'nightly': apo has no execute permission on cluster <its id> of tenant a
    (... --scope cluster:<its id>)`; now who may not do what to which schedule, and why, with
    the cluster by name (which `muster grant --scope cluster:NAME` takes)."""
    from contracts.events import ClusterRequested
    from contracts.identity import PermissionGranted, Scope
    from muster.ports.eventlog import Append

    log = MemoryEventLog()
    await log.append(subjects.cluster_events("a", CLUSTER), [Append(ClusterRequested(
        tenant="a", cluster_id=CLUSTER, name="web", template="t", provider="sim", job_id="j0"), msg_id="c")])
    state = IdentityState()
    for seq, event in enumerate([TenantCreated(tenant="a", by="root"),
                                 PrincipalCreated(principal="uma", role="user", tenant="a", by="root"),
                                 PrincipalCreated(principal="apo", role="user", tenant="a", by="root"),
                                 PermissionGranted(principal="uma", permission="execute", by="root",
                                                   scope=Scope(tenant="a", kind="cluster", id=CLUSTER))], 1):
        state.apply(event, seq)
    writes = GovernanceWrites(log, state)
    schedule = {"name": "nightly", "every_s": 600, "verb": "check", "text": "cluster check web",
                "command": {"type": "CheckCluster", "cluster_id": CLUSTER}}
    made = await writes.answer("a", "uma", "put", GovernanceRequest(kind="schedule", entities=[schedule]).model_dump_json().encode())
    assert made.ok, made
    needs = ("apo has no execute permission on cluster web of tenant a (a tenant admin can give it: muster grant apo execute "
             "--scope cluster:web)")
    for verb, said in (("pause", "apo may not pause schedule 'nightly', which is uma's: pausing another's schedule needs what "
                                 f"its operation `cluster check web` needs, and {needs}"),
                       ("resume", "apo may not resume schedule 'nightly': resuming it needs what its operation `cluster check "
                                  f"web` needs, and {needs}"),
                       ("delete", "apo may not delete schedule 'nightly', which is uma's: deleting another's schedule needs "
                                  f"what its operation `cluster check web` needs, and {needs}")):
        request = GovernanceRequest(kind="schedule", name="nightly")
        answer = await writes.answer("a", "apo", verb, request.model_dump_json().encode())
        assert (answer.ok, answer.code, answer.reason) == (False, "forbidden", said), verb
