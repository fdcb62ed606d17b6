"""Talking to a pool service over the bus (for the CLI, tests and other requesters)."""

from __future__ import annotations

import json
from typing import Any

import nats.errors
from nats.aio.client import Client
from pydantic import TypeAdapter

from contracts import subjects
from contracts.base import DEFERRED
from contracts.commands import Rejected
from contracts.pool_commands import VERB_OF, PoolAnswer, PoolCommand
from muster.bus.connect import auth_required, principal_of
from muster.client import MusterError

ANSWER: TypeAdapter[PoolAnswer | Rejected] = TypeAdapter(PoolAnswer | Rejected, config=DEFERRED)


class PoolRejected(MusterError):
    def __init__(self, reason: str, code: str | None = None) -> None:
        self.reason = reason
        self.code = code  # the answer's RejectionCode: `not_found` for a pool nobody made
        super().__init__(reason)


class NoPoolService(MusterError):
    pass


def _no_answer(nc: Client) -> str:
    text = "no pool service answered: is `muster up` (or `muster pool serve`) running?"
    if auth_required(nc):  # the server drops a command it does not allow: the sender only sees silence
        text += " With auth on, only super admins may send pool commands (tenants read pools with GET /v1/pools)."
    return text


async def send(nc: Client, pool: str, command: PoolCommand, timeout: float = 10.0) -> PoolAnswer:
    """One command, one answer; a refusal raises PoolRejected with the pool's reason."""
    verb = VERB_OF[command.type]  # type: ignore[attr-defined]
    try:
        msg = await nc.request(subjects.pool_command(principal_of(nc), pool, verb), command.model_dump_json().encode(), timeout=timeout)
    except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
        raise NoPoolService(_no_answer(nc)) from None
    answer = ANSWER.validate_json(msg.data)
    if isinstance(answer, Rejected):
        raise PoolRejected(answer.reason, answer.code)
    return answer


async def list_pools(nc: Client, timeout: float = 10.0) -> list[dict[str, Any]]:
    try:
        msg = await nc.request(subjects.pool_list(principal_of(nc)), b"", timeout=timeout)
    except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
        raise NoPoolService(_no_answer(nc)) from None
    return list(json.loads(msg.data))
