"""Attack: a request whose reply subject is no inbox, taken by a service that would answer it
anyway. Each service checks the reply subject before it answers (muster/bus/answers.py,
test_reply_subjects.py); the server must refuse such an answer too, so that a service that
forgot the check (or a new one) cannot be made to write into a tenant's log, a task queue or
a bucket. Services used to have the server's `allow_responses`, which lets a connection
publish on any reply subject of a request it received: here each service's own identity,
connected raw, answers a request naming tenant a's log as its reply, and the server refuses;
the same answer to an inbox goes through."""
from __future__ import annotations

import asyncio
from typing import Any

from contracts import subjects
from muster.bus.wire import flush

from .conftest import Authed
from .test_isolation import Raw, raw

GHOST = "11111111-2222-5333-8444-555555555555"
STOLEN = (f"muster.evt.a.job.{GHOST}", subjects.auth_request("alice", "token-create"))
"""Tenant a's log (the planner writes job events: the server lets it, so its own check only),
and a request to the auth service in the name of a's person."""
SERVICES: dict[str, tuple[str, str]] = {
    # service: (a subject it takes requests on, a request sent there)
    "planner": (f"{subjects.OPS}.*.*.*", subjects.operation("a", "alice", "pause")),
    "solver": (subjects.ALL_SOLVE_REQUESTS, subjects.solve_request("a", "alice")),
    "governance": (subjects.ALL_GOVERNANCE_REQUESTS, subjects.governance_request("a", "alice", "list")),
    "notifier": (f"{subjects.GOV}.*.*.notify-test", subjects.governance_request("a", "alice", "notify-test")),
    "pool": (subjects.ALL_POOL_COMMANDS, f"{subjects.POOL}.root.default.list"),
    "provisioner": (subjects.provisioner_drain("svc-provisioner"), subjects.provisioner_drain("svc-provisioner")),
}


async def test_the_server_refuses_a_services_answer_anywhere_but_an_inbox(authed: Authed) -> None:
    root = await authed.raw(authed.admin_token, "root")
    system = await authed.raw(authed.system_token, "sys")
    conns: list[Raw] = []
    try:
        taken: list[Any] = []

        async def take(msg: Any) -> None:
            taken.append(msg)
            await msg.respond(b"answer")  # as a service without the check would

        seen: list[str] = []
        answered = {kind: asyncio.Event() for kind in SERVICES}

        async def saw(msg: Any) -> None:
            seen.append(msg.subject)
            if msg.subject.startswith("_INBOX.sys."):
                answered[msg.subject.rsplit(".", 1)[1]].set()

        for target in STOLEN:
            await system.subscribe(target, cb=saw)
        await system.subscribe("_INBOX.sys.>", cb=saw)
        await flush(system)
        for kind, (listens, request) in SERVICES.items():
            pid = f"svc-{kind}"
            made = await authed.ask(root, "root", "user-create", principal=pid, role="service", service=kind)
            assert made["ok"], made
            service = await raw(authed, made["data"]["token"], pid)
            conns.append(service)
            await service.nc.subscribe(listens, cb=take)
            await flush(service.nc)
            refused = STOLEN[1:] if kind == "planner" else STOLEN
            for reply in (*refused, f"_INBOX.sys.{kind}"):
                await system.publish(request, b"{}", reply=reply)
            await flush(system)
            for target in refused:
                await service.until_violation("publish", target)  # the server refused it
            await asyncio.wait_for(answered[kind].wait(), 10)  # the inbox is answered
        await flush(system)
        assert not set(STOLEN) & set(seen), seen
    finally:
        for r in conns:
            await r.nc.close()
        await root.close()
        await system.close()

