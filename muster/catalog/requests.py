"""How `muster catalog apply|delete` write: a request to a planner, which checks the requester's
grants and writes its principal as `by` (docs/security.md).

Subjects `muster.ops.<tenant>.<principal>.catalog-apply|catalog-delete`, bodies in
contracts/catalog_requests.py."""

from __future__ import annotations

from typing import Any

import nats.errors
from nats.aio.client import Client
from pydantic import TypeAdapter

from contracts import subjects
from contracts.base import DEFERRED
from contracts.catalog_requests import VERB_OF, CatalogAnswer, CatalogProblem
from contracts.commands import Rejected
from muster.bus.connect import principal_of
from muster.client import NoAnswer, RequestRejected

from .files import CatalogFileError
from .problems import Problem

ANSWER: TypeAdapter[CatalogAnswer | Rejected] = TypeAdapter(CatalogAnswer | Rejected, config=DEFERRED)
TIMEOUT_S = 30.0
"""A planner reads the tenant's catalog (and, for a delete, its clusters) before it answers."""


def problem_json(p: Problem) -> CatalogProblem:
    return CatalogProblem(severity=p.severity, file=p.source, kind=p.kind, entity=p.name, field=p.field, message=p.message)


async def ask_planner(nc: Client, tenant: str, request: Any, timeout: float = TIMEOUT_S) -> CatalogAnswer | None:
    """The planner's answer; None when no planner listens (the caller may write itself, if the
    bus lets it). A refusal (no grant, bad input, a concurrent change) raises RequestRejected."""
    verb = VERB_OF[request.type]
    body = request.model_dump_json().encode()
    if len(body) > nc.max_payload:
        raise CatalogFileError(f"the catalog is {len(body):,} bytes; one request takes at most {nc.max_payload:,}: "
                               "apply it in parts (a folder at a time)")
    try:
        msg = await nc.request(subjects.operation(tenant, principal_of(nc), verb), body, timeout=timeout)
    except nats.errors.NoRespondersError:
        return None
    except nats.errors.TimeoutError:
        raise NoAnswer(f"no planner answered the {verb} within {timeout:g} s") from None
    answer = ANSWER.validate_json(msg.data)
    if isinstance(answer, Rejected):
        raise RequestRejected(answer, verb)
    return answer
