"""A refusal about the services a request chose names the request's field it is about
(`SolveError.fields`, `LayoutUnsolvable.fields`): the console's form shows it at its services
field, HTTP's 422 names it. The dependency refusal (a service that requires one not chosen)
carried no field, and the form showed it at its top."""

from __future__ import annotations

from solver_support import REACTOR_SERVICES

from contracts.catalog import Catalog
from contracts.events import LayoutRequested
from services.solver.domain import SolveError, SolveRequest, solve
from services.solver.service import answer
from tests.unit.solver.test_solver_existing import HDFS, failure, full

NN, DN, RM, NM, HBM, RS, ZK, REACTOR = REACTOR_SERVICES


def create_failure(reactor: Catalog, services: tuple[str, ...]) -> SolveError:
    try:
        solve(reactor, SolveRequest(template="reactor-medium", nodes=5, services=services))
    except SolveError as err:
        return err
    raise AssertionError("solved")


def test_a_created_service_whose_requirement_was_not_chosen_is_about_services(reactor: Catalog) -> None:
    err = create_failure(reactor, (NN, DN, REACTOR))
    assert err.kind == "invalid" and "reactor requires " in err.message and err.fields == ("services",), err
    assert create_failure(reactor, (NN, "nope")).fields == ("services",)


def test_an_added_service_whose_requirement_is_missing_is_about_add_services(reactor: Catalog) -> None:
    err = failure(reactor, HDFS, add_services=(REACTOR,))
    assert "reactor requires " in err.message and err.fields == ("add_services",), err
    assert failure(reactor, HDFS, add_services=(NN,)).fields == ("add_services",)
    assert failure(reactor, full(), remove_services=(ZK,)).fields == ("remove_services",)


def test_the_answer_on_the_bus_carries_the_fields(reactor: Catalog) -> None:
    request = LayoutRequested(job_id="j", cluster_id="c", template="reactor-medium", nodes=5, services=[NN, DN, REACTOR],
                              catalog=reactor.model_dump(mode="json"))
    said = answer(request, "solver-1")
    assert said.type == "LayoutUnsolvable" and said.fields == ["services"], said
    assert said.model_dump(mode="json")["fields"] == ["services"]


def test_a_node_count_past_muster_s_limit_is_about_nodes(reactor: Catalog) -> None:
    """10**19 nodes of a template without a maximum raised ValueError deep in the count search
    (the job failed as "the solver failed on this request"), 10**40 alike: the request is
    refused as invalid, naming `nodes` and the limit, before any model is made."""
    for nodes in (10_001, 10**19, 10**40):
        request = LayoutRequested(job_id="j", cluster_id="c", template="reactor-medium", nodes=nodes,
                                  catalog=reactor.model_dump(mode="json"))
        said = answer(request, "solver-1")
        assert said.type == "LayoutUnsolvable" and said.kind == "invalid" and said.fields == ["nodes"], said
        assert said.message.startswith("nodes: a cluster has at most 10,000 nodes (muster's limit"), said.message
