"""The solver on the bus: answers `LayoutRequested` with `LayoutSolved` / `LayoutUnsolvable`.

Stateless: the request event carries the catalog it needs. Several solvers share the work
through one durable consumer with a queue group; if two ever answer the same request, the
answer is appended with the request's sequence as the expected last sequence, so only the
first lands.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import structlog
from nats.aio.msg import Msg
from pydantic import ValidationError

from contracts.catalog import Catalog
from contracts.commands import MAX_CLUSTER_SIZE, too_many_nodes
from contracts.errors import describe_validation_error, typed_strictly
from contracts.events import LayoutRequested, LayoutSolved, LayoutUnsolvable
from contracts.limits import not_strict_json
from muster import tracing
from muster.bus.answers import answer_on_inbox
from muster.ports.eventlog import Append, ConcurrencyError, EventLog, Recorded

from .domain import SolveError, SolveRequest, solve

log = structlog.get_logger("muster.solver")
tracer = tracing.Tracer("muster.solver")


def answer(request: LayoutRequested, solver: str) -> LayoutSolved | LayoutUnsolvable:
    """Pure: the answer to one request."""
    try:
        catalog = Catalog.model_validate(request.catalog)
    except ValidationError as err:
        return LayoutUnsolvable(job_id=request.job_id, kind="invalid", message=f"catalog in request: {err}", solver=solver,
                                round=request.round)
    solve_request = SolveRequest(
        template=request.template,
        nodes=request.nodes,
        services=tuple(request.services) if request.services is not None else None,
        provider=request.provider,
        hardware=request.hardwaretype,
        image=request.imagetype,
        existing=request.existing,
        add_services=tuple(request.add_services),
        remove_services=tuple(request.remove_services),
        exclude=tuple(request.exclude),
    )
    try:
        layout = solve(catalog, solve_request)
    except SolveError as err:
        return LayoutUnsolvable(job_id=request.job_id, kind=err.kind, message=err.message, fields=list(err.fields), solver=solver,
                                round=request.round)
    return LayoutSolved(job_id=request.job_id, layout=layout, solver=solver, round=request.round)


class SolverService:
    def __init__(self, store: EventLog, name: str) -> None:
        self.store = store
        self.name = name

    async def on_layout_requested(self, recorded: Recorded) -> None:
        request = recorded.event
        with _solving(request, recorded.trace, "consumer", recorded.subject) as span:
            # CPU-bound; a thread keeps this process answering heartbeats and acks meanwhile.
            result = await asyncio.to_thread(answer, request, self.name)
            if isinstance(result, LayoutUnsolvable):
                tracing.set_error(span, f"{result.kind}: {result.message}")
            try:
                await self.store.append(  # (the answer in this span's context)
                    recorded.subject,
                    [Append(result, msg_id=f"{request.job_id}:layout-answer:{recorded.seq}")],
                    expect_last_seq=recorded.seq,
                )
            except ConcurrencyError:
                log.info("request already answered", job=request.job_id)
                return
        log.info("answered", job=request.job_id, result=result.type)

    async def on_poison(self, recorded: Recorded, err: BaseException) -> None:
        """A request the solver fails on every time (a bug, an answer the log refuses): answer
        that it is invalid, so the job fails with the reason instead of waiting forever."""
        if not isinstance(recorded.event, LayoutRequested):
            return
        job_id = recorded.event.job_id
        result = LayoutUnsolvable(job_id=job_id, kind="invalid", solver=self.name,
                                  message=f"the solver failed on this request: {type(err).__name__}: {err}"[:1000])
        try:
            await self.store.append(recorded.subject, [Append(result, msg_id=f"{job_id}:layout-answer:{recorded.seq}")],
                                    expect_last_seq=recorded.seq)
        except ConcurrencyError:
            pass  # answered meanwhile

    async def on_solve_request(self, msg: Msg) -> None:
        """Dry runs, and the admission of a request in a tenant with governance rules: the same
        answer, over request/reply, recorded nowhere; its span a child of the planner's request."""
        # Said in muster's words, as the planner's requests are: pydantic's own text ("1 validation
        # error for LayoutRequested ... errors.pydantic.dev") was the answer, and -1e999 read as -inf.
        result: LayoutSolved | LayoutUnsolvable
        if (not_json := not_strict_json(msg.data)) is not None:
            result = LayoutUnsolvable(job_id="", kind="invalid", message=f"not a solve request: the body {not_json}", solver=self.name)
            await answer_on_inbox(msg, result.model_dump_json().encode())
            return
        try:
            request = typed_strictly(lambda strict: LayoutRequested.model_validate_json(msg.data, strict=strict))  # ("nodes": "3" too)
        except ValidationError as err:
            said = "; ".join([describe_validation_error(err), *_nodes_past_the_limit(msg.data)])
            result = LayoutUnsolvable(job_id="", kind="invalid", message=f"not a solve request: {said}"[:2000], solver=self.name)
        else:
            with _solving(request, (msg.headers or {}).get(tracing.HEADER), "server", msg.subject) as span:
                result = await asyncio.to_thread(answer, request, self.name)
                if isinstance(result, LayoutUnsolvable):
                    tracing.set_error(span, f"{result.kind}: {result.message}")
        await answer_on_inbox(msg, result.model_dump_json().encode())


def _nodes_past_the_limit(data: bytes) -> list[str]:
    """`nodes` past muster's limit, said with the other problems of a body that is no request (a
    valid one hears it from the solver itself, `check_size`). The event's field has no such
    bound of its own: the limit is the commands', which may change, and a request in the log
    keeps its number; so pydantic did not say it, and `{"nodes": 10**40}` was answered about
    the missing fields only."""
    try:
        body = json.loads(data)
    except ValueError:  # (no body: strict JSON, or none)
        return []
    nodes = body.get("nodes") if isinstance(body, dict) else None
    if isinstance(nodes, int) and not isinstance(nodes, bool) and nodes > MAX_CLUSTER_SIZE:
        return [f"nodes: {too_many_nodes(f'{nodes:,}')}"]
    return []


def _solving(request: LayoutRequested, parent: str | None, kind: str, subject: str) -> Any:
    """The `solve` span (docs/tracing.md), under the job's span (through the log) or the
    planner's request (over request/reply)."""
    return tracer.span("solve", parent, kind=kind, tenant=subject.split(".")[2], job=request.job_id, cluster=request.cluster_id,
                       nodes=request.nodes, template=request.template)
