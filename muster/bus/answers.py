"""Where a service sends the answer to a request: an inbox, never another subject.

A request's reply subject is the sender's choice, and nats-server lets a service that answers
requests publish there whatever it names (`allow_responses`; the auth service's own user may
publish anywhere). Tenant b's raw client that named `muster.evt.a.job.<id>`, `muster.task.a.<class>`,
`$KV.leases.…` or `muster.cb.a.…` as the reply of its own `whoami`, `list` or `pause` had every
service write its answer into tenant a's log, task queue and callbacks and into the planners'
bucket. Every muster client receives its answers on an inbox (`_INBOX.<principal>.…`,
docs/security.md), so an answer goes there or nowhere.
"""
from __future__ import annotations

from typing import Any

import structlog

log = structlog.get_logger("muster.bus")

INBOX = "_INBOX."


def answerable(reply: str | None) -> bool:
    """Whether `reply` is an inbox a service may answer on."""
    return bool(reply) and str(reply).startswith(INBOX) and not any(c in str(reply) for c in "*> \t\r\n")


async def answer_on_inbox(msg: Any, data: bytes) -> bool:
    """`msg.respond(data)` when its reply subject is an inbox; else nothing is sent (said in the
    log, for the operator: someone asked for an answer elsewhere)."""
    if not answerable(msg.reply):
        if msg.reply:
            log.warning("request not answered: its reply subject is no inbox", subject=str(msg.subject)[:200],
                        reply=str(msg.reply)[:200])
        return False
    await msg.respond(data)
    return True
