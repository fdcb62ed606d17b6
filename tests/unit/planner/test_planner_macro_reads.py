"""A task whose macros read other nodes' addresses waits for those nodes' confirm (plan.py,
`_Builder.add_reads`): before, it went in its own node's segment, queued with the nodes map of
before the others were up, and failed once (`node X has no bind_v4 address (it has: none yet)`)."""

from __future__ import annotations

from contracts.catalog import Service
from services.planner.domain.plan import build_plan
from services.planner.domain.scheduling import ReadyIndex

from .planner_support import catalog, node, svc

ROUTES = {"nats": {"routes": "%join(map(ip.service.nats,'nats-route://$:6222'),',')%"}}
NODES = [node("n1", "nats"), node("n2", "nats"), node("n3", "nats")]


def nats() -> dict[str, Service]:
    return catalog(svc("nats", ("install", "configure", "start")))


def test_a_task_reading_other_nodes_addresses_waits_for_their_confirm_and_leaves_its_create_s_segment() -> None:
    plan = build_plan(nats(), NODES, "create", config=ROUTES)
    for n in ("n1", "n2", "n3"):
        assert {"n1.confirm", "n2.confirm", "n3.confirm"} <= set(plan.predecessors(f"{n}.install.nats"))
    index = ReadyIndex(plan, (), ())
    assert index.segment("n1.create") == ["n1.confirm", "n1.bootstrap"]  # cut before the install
    # Once every node is confirmed the install is ready, and goes with the map that has them.
    done = {f"n{i}.{a}" for i in (1, 2, 3) for a in ("create", "confirm")}
    index = ReadyIndex(plan, done, ())
    assert index.segment("n1.bootstrap") == ["n1.install.nats", "n1.configure.nats", "n1.start.nats"]


def test_only_the_first_reader_of_a_chain_waits_and_all_nodes_share_one_link() -> None:
    plan = build_plan(nats(), NODES, "create", config=ROUTES)
    reads = [lk for lk in plan.links if "n1.confirm" in lk[0] and len(lk[0]) > 1]
    assert reads == [(("n1.confirm", "n2.confirm", "n3.confirm"), ("n1.install.nats", "n2.install.nats", "n3.install.nats"))]


def test_macros_that_read_no_other_node_change_no_plan() -> None:
    """The layout's own macros (`num`, `instance`), the node's own values and a service only on
    the task's node need no wait: the plan is the one without a config."""
    plain = build_plan(nats(), NODES, "create")
    config = {"nats": {"size": "%num.service.nats%", "id": "%instance.self.service.nats%", "me": "%ip.self%",
                       "host": "%host.self%", "owner": "%cluster.owner%", "broken": "%ip.service.%"}}
    assert build_plan(nats(), NODES, "create", config=config).links == plain.links
    services = catalog(svc("nats", ("install", "configure", "start")), svc("db", ("install",)))
    alone = [node("n1", "nats", "db"), node("n2")]  # n2 runs nothing that reads it
    assert (build_plan(services, alone, "create", config={"db": "%ip.service.db%"}).links
            == build_plan(services, alone, "create").links)


def test_an_action_s_fields_are_read_too_and_only_their_own_task_waits() -> None:
    vars_ = Service.model_validate({"name": "app", "provisioner": {"actions": {
        "install": {"type": "shell", "fields": {"script": "install"}},
        "configure": {"type": "ansible", "fields": {"role": "app", "vars": '{"db": "%host.service.db%"}'}}}}})
    services = catalog(vars_, svc("db", ("install",)))
    plan = build_plan(services, [node("n1", "app"), node("n2", "db")], "create")
    assert "n2.confirm" in plan.predecessors("n1.configure.app")
    assert "n2.confirm" not in plan.predecessors("n1.install.app")


def test_an_expand_waits_for_the_new_nodes_only_and_the_stages_stay() -> None:
    nodes = [*NODES, node("n4", "nats")]
    plan = build_plan(nats(), nodes, "expand", node_ids=["n4"], config=ROUTES)
    assert plan.predecessors("n4.install.nats") == ("n4.bootstrap",)  # n4's own confirm is before it
    two = build_plan(nats(), [*nodes, node("n5", "nats")], "expand", node_ids=["n4", "n5"], config=ROUTES)
    assert set(two.predecessors("n4.install.nats")) == {"n4.bootstrap", "n4.confirm", "n5.confirm"}
    assert two.stages == build_plan(nats(), [*nodes, node("n5", "nats")], "expand", node_ids=["n4", "n5"]).stages


def test_a_repair_s_confirm_of_nodes_that_were_up_holds_no_start_back() -> None:
    """Their addresses are in the map already: only the nodes a plan makes are waited for."""
    repair = build_plan(nats(), NODES, "repair-node", node_ids=["n1", "n2"], config=ROUTES)
    assert repair.links == build_plan(nats(), NODES, "repair-node", node_ids=["n1", "n2"]).links


def test_a_delete_of_services_gone_from_the_catalog_still_plans() -> None:
    """Its nodes' services need not be in the catalog any more (`build_plan`)."""
    plan = build_plan(catalog(), [node("n1", "gone")], "delete", config=ROUTES)
    assert [t.id for t in plan.tasks] == ["n1.delete"]
