"""A refusal says what kind it is and which field of the request is at fault (`Rejected.code`,
`.field`, `.job_id`): what the tracker turns into an HTTP status and an error at a form's field.
The template's compatibility is checked at admission, so a forbidden service or hardware type is
refused before anything is recorded. A saved plan is applied with the permission of its own
operation on its own cluster."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from nats.js.errors import NoStreamResponseError, ServiceUnavailableError
from planner_harness import Harness, demo_catalog, identities

from contracts.commands import (
    Accepted,
    AddServices,
    ApplyPlan,
    CancelJob,
    CheckCluster,
    CreateCluster,
    DeleteCluster,
    DryRun,
    ExpandCluster,
    PauseJob,
    Rejected,
    RestartServices,
    Rolling,
    ShrinkCluster,
    StartServices,
    StopServices,
    UpgradeService,
)
from contracts.identity import Scope
from muster.ports.eventlog import ConcurrencyError


def _create(**fields: Any) -> CreateCluster:
    return CreateCluster(**{"name": "c9", "template": "hadoop-small", "nodes": 3, **fields})


REFUSED_CREATES = [
    (_create(nodes=60), "invalid", "nodes", "allows 2 to 50 nodes (its size constraint)"),
    (_create(template="nope"), "invalid", "template", "nope"),
    (_create(services=["base", "ghost"]), "invalid", "services", "unknown services: ghost"),
    (_create(hardwaretype="huge"), "invalid", "hardwaretype", "unknown hardware type 'huge'"),
    (_create(provider="elsewhere"), "invalid", "provider", "unknown provider 'elsewhere'"),
]


@pytest.mark.parametrize(("command", "code", "field", "words"), REFUSED_CREATES, ids=[r[2] for r in REFUSED_CREATES])
async def test_a_refused_create_names_its_kind_and_field_and_records_nothing(command: CreateCluster, code: str, field: str,
                                                                             words: str) -> None:
    h = Harness()
    for dry in (True, False):
        reply = await h.send(command.model_copy(update={"dry_run": dry}))
        assert isinstance(reply, Rejected) and (reply.code, reply.field) == (code, field) and words in reply.reason, reply
    assert h.log.records == []


async def test_a_create_with_several_mistakes_is_refused_for_each_at_its_field_at_once() -> None:
    """A form with three mistakes was told of one per preview (the first rule's): every rule
    runs, each problem is named with its field, and the reason (what the CLI shows) says each."""
    h = Harness()
    await h.send(_create(name="taken"))
    for dry in (True, False):
        reply = await h.send(_create(name="taken", template="nope", nodes=60, provider="elsewhere", hardwaretype="huge",
                                     imagetype="nonesuch", services=["base", "ghost"], dry_run=dry))
        assert isinstance(reply, Rejected), reply
        fields = [p.field for p in reply.problems]
        assert fields == ["template", "provider", "services", "hardwaretype", "imagetype", *(["name"] if dry else [])], reply
        assert reply.field == fields[0] and all(p.reason in reply.reason for p in reply.problems)
        assert "unknown cluster template 'nope'" in reply.reason and "unknown provider 'elsewhere'" in reply.reason
    # On a template that is there, its bounds and compatibility are checked with the rest.
    reply = await h.send(_create(nodes=60, provider="elsewhere", hardwaretype="huge", dry_run=True))
    assert isinstance(reply, Rejected) and [p.field for p in reply.problems] == ["nodes", "provider", "hardwaretype"], reply
    assert "allows 2 to 50 nodes (its size constraint)" in reply.problems[0].reason
    # One problem is said as before: no list.
    reply = await h.send(_create(nodes=60, dry_run=True))
    assert isinstance(reply, Rejected) and reply.problems == [] and "problems" not in reply.model_dump(mode="json")


async def test_a_service_or_image_the_template_does_not_allow_is_refused_at_admission() -> None:
    catalog = demo_catalog()
    catalog.clustertemplates["hadoop-small"].compatibility.services.remove("zookeeper-server")
    catalog.clustertemplates["hadoop-small"].compatibility.imagetypes.remove("centos7")
    h = Harness(catalog=catalog)
    reply = await h.send(_create(services=["base", "zookeeper-server"]))
    assert isinstance(reply, Rejected) and reply.field == "services" and "does not allow zookeeper-server" in reply.reason
    reply = await h.send(_create(imagetype="centos7", services=["base"]))
    assert isinstance(reply, Rejected) and reply.field == "imagetype" and "does not allow image type 'centos7'" in reply.reason
    assert h.log.records == []


async def test_refusals_of_an_existing_clusters_operations_say_what_moved() -> None:
    h = Harness()
    cid = await h.cluster_of(3)
    version = h.cluster(cid).version
    cases: list[tuple[Any, str, str | None]] = [
        (ShrinkCluster(cluster_id=cid, nodes=5), "invalid", "nodes"),
        (ExpandCluster(cluster_id=cid, nodes=5, if_version=version + 1), "precondition", "if_version"),
        (ExpandCluster(cluster_id="0" * 8, nodes=5), "not_found", "cluster_id"),
        (AddServices(cluster_id=cid, services=["base"]), "invalid", "services"),
        (PauseJob(job_id="nojob"), "not_found", "job_id"),
    ]
    for command, code, field in cases:
        reply = await h.send(command)
        assert isinstance(reply, Rejected) and (reply.code, reply.field) == (code, field), (command, reply)
    raw = await h.send_raw("expand", b'{"cluster_id": "x", "nodes": "many"}')
    assert isinstance(raw, Rejected) and (raw.code, raw.field) == ("invalid", "nodes"), raw


async def test_a_reused_request_id_names_the_first_job_and_a_stale_plan_its_field() -> None:
    h = Harness()
    first = await h.ok(_create(request_id="key-1"))
    again = await h.send(_create(request_id="key-1", nodes=4))
    assert isinstance(again, Rejected) and (again.code, again.field, again.job_id) == ("conflict", "request_id", first.job_id)
    await h.settle()
    plan = await h.send(ExpandCluster(cluster_id=first.cluster_id, nodes=5, dry_run=True))
    assert isinstance(plan, DryRun) and plan.plan_id
    await h.ok(ExpandCluster(cluster_id=first.cluster_id, nodes=4))
    await h.settle()
    stale = await h.send(ApplyPlan(plan_id=plan.plan_id))
    assert isinstance(stale, Rejected) and (stale.code, stale.field) == ("stale", "plan_id") and "version" in stale.reason
    wire = stale.model_dump(mode="json")
    assert "job_id" not in wire and "retry" not in wire  # left out when unset


async def test_a_saved_plan_is_applied_with_the_permission_of_its_own_operation() -> None:
    h = Harness()
    cid = await h.cluster_of(3)  # before identities are checked
    scope = Scope(tenant="default", kind="cluster", id=cid)
    h.ports["identities"] = identities(("operator", "write", scope), ("reader", "read", scope))
    await h.restart()
    plan = await h.send(ExpandCluster(cluster_id=cid, nodes=4, dry_run=True), principal="operator")
    assert isinstance(plan, DryRun) and plan.plan_id
    refused = await h.send(ApplyPlan(plan_id=plan.plan_id), principal="reader")
    assert isinstance(refused, Rejected) and refused.code == "forbidden" and "no write permission on cluster" in refused.reason
    accepted = await h.send(ApplyPlan(plan_id=plan.plan_id), principal="operator")  # write on that cluster only
    assert not isinstance(accepted, Rejected), accepted


async def test_job_control_of_a_job_the_tenant_does_not_have_is_refused_as_unknown_not_as_a_missing_grant() -> None:
    """Walk of session 22: `muster job cancel <a mistyped id>` said `alice has no execute
    permission on job ...` and how to grant it, on a job that is not there."""
    h = Harness()
    cid = await h.cluster_of(2)
    h.ports["identities"] = identities(("operator", "execute", Scope(tenant="default", kind="cluster", id="*")))
    await h.restart()
    ghost = "00000000-0000-4000-8000-000000000000"
    for who in ("operator", "reader"):  # (reads answer 404 for it to anyone: the same here)
        refused = await h.send(CancelJob(job_id=ghost), principal=who)
        assert isinstance(refused, Rejected) and (refused.code, refused.field) == ("not_found", "job_id"), refused
        assert refused.reason == f"unknown job '{ghost}' in tenant 'default' (`muster job list` lists its jobs)", refused
    restart = await h.send(RestartServices(cluster_id=cid), principal="root")  # a job that is there: the grant is what lacks
    assert isinstance(restart, Accepted), restart
    job = restart.job_id
    refused = await h.send(CancelJob(job_id=job), principal="reader")
    assert isinstance(refused, Rejected) and refused.code == "forbidden" and "no execute permission" in refused.reason, refused



async def test_an_operation_on_a_cluster_the_tenant_does_not_have_says_so_as_its_reads_do() -> None:
    """Walk of session 24: a stop, a delete, an expand of another tenant's cluster or of none said
    `unknown cluster '<id>'`, where `muster cluster show` and `GET /v1/clusters/<id>` say `no
    cluster <id> in tenant <tenant>`; the same words for both, so they tell nothing of another
    tenant's clusters."""
    h = Harness()
    cid = await h.cluster_of(2)  # tenant default's
    ghost = "00000000-0000-4000-8000-000000000000"
    for command in (StopServices, DeleteCluster):
        for ident in (cid, ghost):
            refused = await h.send(command(cluster_id=ident), tenant="other")
            assert isinstance(refused, Rejected) and (refused.code, refused.field) == ("not_found", "cluster_id"), refused
            assert refused.reason == f"no cluster {ident} in tenant other", refused
    refused = await h.send(ExpandCluster(cluster_id=ghost, nodes=3))
    assert isinstance(refused, Rejected) and refused.reason == f"no cluster {ghost} in tenant default", refused
    # (Without a grant on the cluster, a user is refused for the grant, as its read is: a 403 naming it.)

UNAVAILABLE = [
    ("append", TimeoutError()),
    ("append", NoStreamResponseError()),  # the stream had no leader to answer the publish
    ("read_many", ServiceUnavailableError(code=503, err_code=10008, description="JetStream system temporarily unavailable")),
]


async def _to_be_sent_again_then_done_once(h: Harness, command: Any, failed: list[str]) -> None:
    """The first try failed as injected and was answered "send it again"; the second is
    accepted, and the log holds the job once."""
    first = await h.send(command)
    assert failed and isinstance(first, Rejected) and first.retry and first.code == "unavailable", first
    again = await h.send(command)
    assert not isinstance(again, Rejected), again
    await h.settle()
    assert len(h.events(again.job_id, "JobRequested")) == 1


@pytest.mark.parametrize(("method", "error"), UNAVAILABLE, ids=["append timed out", "append unanswered", "read 503"])
async def test_a_request_the_log_did_not_answer_in_time_is_to_be_sent_again(method: str, error: Exception) -> None:
    """The log fails once under a create (a leader election after a partition healed: the job's
    append times out or finds no leader, or the governance read answers 503): whether anything
    landed is unknown. The answer is "send it again" (`retry`, `unavailable`), not an internal
    error the client takes as final; the same request sent again makes one job."""
    h = Harness()
    real = getattr(h.log, method)
    failed: list[Any] = []

    async def fails_once(*args: Any, **kwargs: Any) -> Any:
        if not failed and (method != "append" or ".job." in args[0]):
            failed.append(args[0])
            raise error
        return await real(*args, **kwargs)

    setattr(h.log, method, fails_once)
    command = _create(request_id="r-timeout")
    await _to_be_sent_again_then_done_once(h, command, failed)


async def test_a_cluster_operation_whose_job_save_finds_the_log_moved_on_is_to_be_sent_again() -> None:
    """The 30-minute partition soak: a delete's job append found its subject moved on (the same
    request's first try had landed through another planner, whose answer was lost), and the
    requester was told "internal error" while the log went on with the job. A stale write in
    the request path is answered "send it again": the failed save reloaded the planner's state,
    and the request, sent again with its id, is decided afresh."""
    h = Harness()
    created = await h.send(_create(request_id="r-made"))
    assert not isinstance(created, Rejected), created
    await h.settle()
    cid = created.cluster_id
    seen: list[str] = []
    failed: list[str] = []

    def moved_on_once(subject: str, items: Any) -> bool:
        # The job's first save (JobRequested) lands; its next one, as the job starts, finds
        # that another planner wrote there meanwhile (it took the shard over and adopted it).
        if ".job." in subject and not failed:
            seen.append(subject)
            if len(seen) == 2:
                failed.append(subject)
                return True
        return False

    h.log.inject(moved_on_once, ConcurrencyError("wrong last sequence"))
    command = DeleteCluster(cluster_id=cid, request_id="r-delete")
    await _to_be_sent_again_then_done_once(h, command, failed)


async def test_a_service_not_in_the_catalog_is_refused_at_its_field_for_every_verb_that_names_services() -> None:
    h = Harness()
    cid = await h.cluster_of(2)
    before = len(h.log.records)
    for command, field in ((StartServices(cluster_id=cid, services=["nope"]), "services"),
                           (StopServices(cluster_id=cid, services=["base", "nope"]), "services"),
                           (RestartServices(cluster_id=cid, services=["nope"]), "services"),
                           (UpgradeService(cluster_id=cid, service="nope"), "service"),
                           # (walk of session 26: a check said "cannot plan check: service nope is not in the catalog")
                           (CheckCluster(cluster_id=cid, services=["nope"]), "services")):
        for dry in (True, False):
            reply = await h.send(command.model_copy(update={"dry_run": dry}))
            assert isinstance(reply, Rejected) and (reply.code, reply.field) == ("invalid", field), (command, reply)
            # (walk of session 22: it said "unknown service 'nope': not in the catalog", not the cluster's services)
            assert reply.reason.startswith("cluster 'c1' has no service 'nope' (not in the catalog); its services: base, "), reply
    assert len(h.log.records) == before


async def test_a_service_of_the_catalog_not_on_the_cluster_is_named_with_the_services_the_cluster_has() -> None:
    h = Harness()
    cid = (await h.ok(CreateCluster(name="zk", template="hadoop-small", nodes=2, services=["base", "zookeeper-server"]))).cluster_id
    reply = await h.send(RestartServices(cluster_id=cid, services=["base", "nope", "hdfs-namenode"]))
    assert isinstance(reply, Rejected) and (reply.code, reply.field) == ("invalid", "services"), reply
    assert reply.reason == ("cluster 'zk' has no services 'hdfs-namenode' (not on this cluster), 'nope' (not in the catalog); "
                            "its services: base, zookeeper-server"), reply
    reply = await h.send(StopServices(cluster_id=cid, services=["zookeeper-serv"]))
    assert isinstance(reply, Rejected) and reply.reason.endswith("(did you mean 'zookeeper-server'?)"), reply


async def test_an_unknown_template_or_service_gets_a_did_you_mean_among_what_the_requester_may_read() -> None:
    h = Harness()
    reply = await h.send(_create(template="hadoop-smal"))
    assert isinstance(reply, Rejected) and reply.field == "template", reply
    assert reply.reason == "unknown cluster template 'hadoop-smal' (did you mean 'hadoop-small'?)"
    reply = await h.send(_create(services=["base", "zookeper-server"]))
    assert isinstance(reply, Rejected) and reply.reason.endswith("(did you mean 'zookeeper-server'?)"), reply
    cid = await h.cluster_of(2)
    reply = await h.send(UpgradeService(cluster_id=cid, service="bsae"))
    assert isinstance(reply, Rejected) and reply.reason.endswith("(did you mean 'base'?)"), reply
    assert (await h.send(_create(template="zzz"))).reason == "unknown cluster template 'zzz'"


async def test_a_did_you_mean_names_no_template_the_requester_may_not_read() -> None:
    writes = ("builder", "write", Scope(tenant="default", kind="cluster", id="*"))
    h = Harness(identities=identities(writes))
    reply = await h.send(_create(template="hadoop-smal"), principal="builder")
    assert isinstance(reply, Rejected) and "did you mean" not in reply.reason, reply
    h = Harness(identities=identities(writes, ("builder", "read", Scope.parse("default", "catalog:clustertemplates/hadoop-small"))))
    reply = await h.send(_create(template="hadoop-smal"), principal="builder")
    assert isinstance(reply, Rejected) and reply.reason.endswith("(did you mean 'hadoop-small'?)"), reply


async def test_a_create_names_a_template_its_requester_may_read() -> None:
    """What the console's create form lists (the templates its viewer may read) is what a create
    may name, from the CLI and HTTP too: `write` on every cluster without `read` on the template
    was a create the CLI made and the console could not offer. The same words for a template that
    does not exist, and nothing recorded."""
    writes = ("builder", "write", Scope(tenant="default", kind="cluster", id="*"))
    h = Harness(identities=identities(writes))
    for template in ("hadoop-small", "secret-one"):
        for dry in (True, False):
            reply = await h.send(_create(template=template, dry_run=dry), principal="builder")
            assert isinstance(reply, Rejected) and (reply.code, reply.field) == ("forbidden", "template"), reply
            assert reply.reason == (f"builder may not create a cluster from template {template!r}: that needs read on "
                                    f"catalog:clustertemplates/{template} or catalog:* (a tenant admin can give it: "
                                    f"muster grant builder read --scope catalog:clustertemplates/{template})"), reply
    assert h.log.records == []
    h = Harness(identities=identities(writes, ("builder", "read", Scope.parse("default", "catalog:clustertemplates/hadoop-small"))))
    assert isinstance(await h.send(_create(), principal="builder"), Accepted)


async def test_a_config_whose_macro_names_a_service_the_cluster_has_not_is_accepted_with_a_warning() -> None:
    """The Ansible flavour's Redis configured with the shell flavour's `%ip.service.redis-primary%`
    (docs' /tmp/redis.yaml as written): the macro stays as written, and the replicas waited 3 x 60 s
    for a primary of that name, failing with `no message`. The answer (and its dry run) says so."""
    from contracts.commands import ConfigureCluster, DryRun

    h = Harness()
    config = {"zk": {"quorum": "%join(map(ip.service.zookeeper,'$:2181'),',')%", "me": "%ip.self%"}}
    said = ("config: a macro names service 'zookeeper', which the cluster does not have (its services: base, zookeeper-server): "
            "it stays as written, %...% and all (did you mean 'zookeeper-server'?)")
    dry = await h.send(_create(services=["base", "zookeeper-server"], config=config, dry_run=True))
    assert isinstance(dry, DryRun) and said in dry.warnings, dry.warnings
    made = await h.send(_create(services=["base", "zookeeper-server"], config=config))
    assert isinstance(made, Accepted) and said in made.warnings, made.warnings
    cid = await h.cluster_of(3)
    reply = await h.send(ConfigureCluster(cluster_id=cid, config=config))
    assert isinstance(reply, Accepted) and any("names service 'zookeeper'" in w for w in reply.warnings), reply.warnings
    right = await h.send(ConfigureCluster(cluster_id=await h.cluster_of(3, "c2"), config={"zk": "%ip.service.zookeeper-server%"}))
    assert isinstance(right, Accepted) and not right.warnings, right.warnings


async def test_a_configure_whose_macro_names_a_node_the_service_has_not_warns_and_the_task_is_not_retried() -> None:
    """`%host.service.zookeeper-server[5]%` on a cluster with one zookeeper-server was accepted in
    silence, its dry run too, and its tasks failed three times each before the rollback."""
    from contracts.commands import ConfigureCluster, DryRun

    h = Harness()
    cid = await h.cluster_of(3)
    config = {"zk": {"fifth": "%host.service.zookeeper-server[5]%", "first": "%host.service.zookeeper-server[0]%"}}
    said = ("config: a macro names node [5] of service 'zookeeper-server', which runs on 1 node(s) (counted from 0): "
            "the tasks that expand it fail, not retried")
    dry = await h.send(ConfigureCluster(cluster_id=cid, config=config, dry_run=True))
    assert isinstance(dry, DryRun) and dry.warnings == [said], dry.warnings
    fine = await h.send(ConfigureCluster(cluster_id=cid, config={"zk": "%host.service.zookeeper-server[0]%"}, dry_run=True))
    assert isinstance(fine, DryRun) and fine.warnings == [], fine.warnings
    reply = await h.send(ConfigureCluster(cluster_id=cid, config=config))
    assert isinstance(reply, Accepted) and reply.warnings == [said], reply.warnings


def _with_unmapped_provider() -> Any:
    """The demo catalog with a provider `cloud` that only one hardware type and no image type map."""
    from contracts.catalog import Provider
    catalog = demo_catalog()
    catalog.providers["cloud"] = Provider.model_validate({"name": "cloud", "providertype": "simulated", "provisioner": {}})
    catalog.providers["bare"] = Provider.model_validate({"name": "bare", "providertype": "simulated", "provisioner": {}})
    catalog.hardwaretypes["large"].providermap["cloud"] = {"flavor": "xl"}
    return catalog


async def test_a_create_on_a_provider_no_type_of_its_template_maps_is_refused_at_the_create() -> None:
    """A create on a provider no hardware type maps was accepted, and failed at layout time. It
    is refused at the preview and the create, naming the provider, the types the template allows
    and the providers they map, with every other problem of the request."""
    h = Harness(catalog=_with_unmapped_provider())
    for dry in (True, False):
        reply = await h.send(_create(provider="bare", nodes=60, dry_run=dry))
        assert isinstance(reply, Rejected), reply
        assert [p.field for p in reply.problems] == ["nodes", "provider", "provider"], reply
        hardware, image = reply.problems[1].reason, reply.problems[2].reason
        assert hardware.startswith("no hardware type that template 'hadoop-small' allows (large, medium, small) maps provider 'bare'")
        assert "they map cloud, sim" in hardware and "no 'flavor' for it" in hardware, hardware
        assert image.startswith("no image type that template 'hadoop-small' allows (centos7, ubuntu22) maps provider 'bare'"), image
    # A hardware type maps `cloud`, no image type does; a type named in the request is judged alone.
    reply = await h.send(_create(provider="cloud", hardwaretype="small", dry_run=True))
    assert isinstance(reply, Rejected) and [p.field for p in reply.problems] == ["hardwaretype", "provider"], reply
    assert reply.problems[0].reason.startswith("hardware type 'small' does not map provider 'cloud'"), reply
    assert "it maps sim" in reply.problems[0].reason
    assert h.log.records == []
    # Mapped, it is accepted.
    catalog = _with_unmapped_provider()
    catalog.imagetypes["ubuntu22"].providermap["cloud"] = {"image": "u22"}
    reply = await Harness(catalog=catalog).send(_create(provider="cloud", dry_run=True))
    assert not isinstance(reply, Rejected), reply


async def test_a_service_whose_requirement_was_not_chosen_is_refused_at_the_services_field() -> None:
    """The solver's dependency refusal, in a dry run (the console's form, HTTP's 422): it had no
    field, and the form said it at its top. A real create or add-services was accepted, and its
    job failed `no layout: ...` a moment later (a create's left a failed cluster): admission
    refuses it from the catalog alone, nothing recorded."""
    h = Harness()
    for dry in (True, False):
        reply = await h.send(_create(services=["base", "yarn-nodemanager"], dry_run=dry))
        assert isinstance(reply, Rejected) and (reply.code, reply.field) == ("invalid", "services"), reply
        assert reply.reason == "yarn-nodemanager requires yarn-resourcemanager, which no service on the cluster is or provides"
    assert h.log.records == []
    cid = (await h.ok(_create(name="zk", nodes=2, services=["base", "zookeeper-server"]))).cluster_id
    before = len(h.log.records)
    for dry in (True, False):
        reply = await h.send(AddServices(cluster_id=cid, services=["yarn-nodemanager"], dry_run=dry))
        assert isinstance(reply, Rejected) and (reply.code, reply.field) == ("invalid", "services"), reply
        assert "yarn-nodemanager requires yarn-resourcemanager" in reply.reason, reply
    assert len(h.log.records) == before
    # What the cluster has meets a requirement: hdfs-namenode needs zookeeper-server, there already.
    assert isinstance(await h.send(AddServices(cluster_id=cid, services=["hdfs-namenode"], dry_run=True)), DryRun)


async def test_services_that_conflict_or_defaults_missing_a_requirement_are_refused_at_admission() -> None:
    """A `conflicts` partner chosen with a service or already on the cluster; a template whose
    default services miss a requirement is refused at the template's field (the request chose none)."""
    catalog = demo_catalog(loner={"dependencies": {"conflicts": ["zookeeper-server"]}})
    catalog.clustertemplates["hadoop-small"].defaults.services.remove("hdfs-namenode")
    h = Harness(catalog=catalog)
    reply = await h.send(_create(services=["base", "loner", "zookeeper-server"]))
    assert isinstance(reply, Rejected) and (reply.code, reply.field) == ("invalid", "services"), reply
    assert reply.reason == "loner conflicts with zookeeper-server", reply
    reply = await h.send(_create())
    assert isinstance(reply, Rejected) and (reply.code, reply.field) == ("invalid", "template"), reply
    assert "hdfs-datanode requires hdfs-namenode" in reply.reason and "yarn-resourcemanager requires hdfs-namenode" in reply.reason
    assert h.log.records == []
    cid = (await h.ok(_create(name="zk", nodes=2, services=["base", "zookeeper-server"]))).cluster_id
    reply = await h.send(AddServices(cluster_id=cid, services=["loner"]))
    assert isinstance(reply, Rejected) and reply.reason == "loner conflicts with zookeeper-server", reply
    # The one on the cluster says it: adding what it conflicts with is refused too.
    cid = (await h.ok(_create(name="lone", nodes=2, services=["base", "loner"]))).cluster_id
    reply = await h.send(AddServices(cluster_id=cid, services=["zookeeper-server"]))
    assert isinstance(reply, Rejected) and reply.reason == "loner conflicts with zookeeper-server", reply


def test_a_solvers_fields_are_the_commands_services() -> None:
    """What a dry run refused by the solver names (`NoLayout.fields`, the layout request's)."""
    from services.planner.domain.planning import command_field

    assert command_field(_create(), ["services"]) == "services"
    assert command_field(AddServices(cluster_id=str(uuid.uuid4()), services=["a"]), ["add_services"]) == "services"
    assert command_field(ExpandCluster(cluster_id=str(uuid.uuid4()), nodes=4), ["services"]) is None  # (the cluster's own)
    assert command_field(_create(), []) is None


async def test_a_create_naming_no_services_or_an_empty_name_is_refused_in_words_that_fit() -> None:
    """`"services": []` was answered by the solver: `template 'hadoop-small' has no default
    services and none were requested` (it has six); `[""]` said `unknown services: ` (nothing)."""
    h = Harness()
    for dry in (True, False):
        reply = await h.send(_create(services=[], dry_run=dry))
        assert isinstance(reply, Rejected) and (reply.code, reply.field) == ("invalid", "services"), reply
        assert reply.reason.startswith("no services named: name at least one, or leave services out for the template's "
                                       "defaults (base, "), reply
    reply = await h.send(_create(services=["base", ""], dry_run=True))
    assert isinstance(reply, Rejected) and reply.field == "services" and reply.reason.startswith("unknown services: ''"), reply
    assert h.log.records == []


async def test_a_rolling_batch_out_of_range_is_refused_at_its_field() -> None:
    """`"rolling": {"batch": "150%"}` passes the contract's pattern and was refused by the plan
    with no field (HTTP's 422 said `parameter: null`, the console's form said it atop)."""
    h = Harness()
    cid = await h.cluster_of(2)
    for batch in ("150%", "0%"):
        reply = await h.send(UpgradeService(cluster_id=cid, service="base", rolling=Rolling(batch=batch), dry_run=True))
        assert isinstance(reply, Rejected) and (reply.code, reply.field) == ("invalid", "rolling.batch"), reply
        assert f"rolling batch '{batch}' is neither a count nor a percentage in (0, 100]" in reply.reason, reply
