"""Where the pool service may POST a callback (decision 38, docs/pools.md "Where callbacks may
go"): the notifier's rule, the operator's one setting. A URL aimed inside the deployment is refused
when the request comes, in words that name the rule and the setting and never an address a name
resolved to; a POST is checked again at the connection and refused once, never retried."""

from __future__ import annotations

import socket

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from contracts.commands import Rejected
from contracts.pool_commands import ANY_POOL, AddHosts, CheckCallback, PoolAnswer, RequestHosts
from contracts.pools import Callback
from muster.destinations import Allowed
from muster.ports.memory import ManualClock, MemoryEventLog
from services.pool.adapters.callbacks import CallbackSender
from services.pool.app import PoolService

from .pool_support import host, request


class Answers(AbstractResolver):
    """A DNS that answers each name with its address, and knows no other name."""

    def __init__(self, **names: str) -> None:
        self.names = {k.replace("_", "."): v for k, v in names.items()}
        self.asked: list[str] = []

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        self.asked.append(host)
        if host not in self.names:
            raise OSError(f"no such name {host}")
        ip = self.names[host]
        return [{"hostname": host, "host": ip, "port": port, "family": socket.AF_INET6 if ":" in ip else socket.AF_INET,
                 "proto": 0, "flags": socket.AI_NUMERICHOST}]

    async def close(self) -> None:
        pass


DNS = dict(hooks_internal="10.1.2.3", ci_example="93.184.216.34", sneaky_example="127.0.0.1")


def sender(allowed: Allowed | None = None) -> CallbackSender:
    return CallbackSender(None, attempts=5, backoff_s=0.0, allowed=allowed or Allowed(), resolver=Answers(**DNS))  # type: ignore[arg-type]


@pytest.mark.parametrize(("url", "said"), [
    ("http://127.0.0.1:8080/hook", "127.0.0.1 is a loopback address"),
    ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address (a cloud's metadata service"),
    ("http://[::ffff:127.0.0.1]/hook", "::ffff:127.0.0.1 is a loopback address"),
    ("https://hooks.internal/pool", "hooks.internal resolves to a private address"),
    ("http://sneaky.example/pool", "sneaky.example resolves to a loopback address"),
])
async def test_a_callback_aimed_inside_the_deployment_is_refused_naming_the_rule_and_the_setting(url: str, said: str) -> None:
    problem, warning = await sender().check(Callback(url=url))
    assert problem.startswith(said) and warning == ""
    assert "the pool service sends callbacks to public addresses only" in problem
    assert "`muster pool serve --webhook-allow`" in problem and "$MUSTER_WEBHOOK_ALLOW" in problem and "docs/pools.md" in problem
    assert "10.1.2.3" not in problem  # never the address a name resolved to


async def test_what_the_operator_allows_and_public_addresses_are_taken_and_a_bus_subject_is_not_a_url() -> None:
    allowed = sender(Allowed.parse(["127.0.0.1", "hooks.internal"]))
    assert await allowed.check(Callback(url="http://127.0.0.1:8080/hook")) == ("", "")
    assert await allowed.check(Callback(url="https://hooks.internal/pool")) == ("", "")
    assert await sender().check(Callback(url="https://ci.example/hooks/pool")) == ("", "")
    assert await sender().check(Callback(subject="muster.cb.acme.r1")) == ("", "")


async def test_a_host_that_does_not_resolve_now_is_a_warning_not_a_refusal() -> None:
    problem, warning = await sender().check(Callback(url="https://nowhere.example/pool"))
    assert problem == "" and warning.startswith("nowhere.example does not resolve now (no such name nowhere.example)")


async def test_a_post_to_a_refused_address_is_never_made_nor_retried() -> None:
    s = sender()
    attempts, error = await s.send(Callback(url="http://127.0.0.1:9/hook"), {"type": "granted"})
    assert attempts == 1 and error.startswith("refused: 127.0.0.1 is a loopback address")
    attempts, error = await s.send(Callback(url="http://sneaky.example:9/hook"), {"type": "granted"})  # refused at the connection
    assert attempts == 1 and error.startswith("refused: sneaky.example resolves to a loopback address")
    assert isinstance(s.resolver, Answers) and s.resolver.asked == ["sneaky.example"]
    await s.close()


def test_the_sender_is_made_outside_a_loop() -> None:
    """(aiohttp's resolver needs a running loop: the checked one is made on first use)"""
    assert CallbackSender(None).allowed == Allowed()  # type: ignore[arg-type]


async def test_the_pool_service_refuses_such_a_request_before_recording_anything_and_answers_the_planners_check() -> None:
    log = MemoryEventLog(ManualClock())
    service = PoolService(nc=None, store=log, sender=sender())  # type: ignore[arg-type]
    added = await service.handle_command("p", "add-hosts", AddHosts(hosts=[host(1)]).model_dump_json().encode(), "root")
    assert isinstance(added, PoolAnswer)
    before = len(log.records)
    asked = RequestHosts(request=request("r1", 1, callback=Callback(url="http://169.254.169.254/latest/meta-data/")))
    refused = await service.handle_command("p", "request", asked.model_dump_json().encode(), "root")
    assert isinstance(refused, Rejected) and refused.reason.startswith("callback: 169.254.169.254 is a link-local address")
    assert len(log.records) == before  # nothing recorded
    check = CheckCallback(callback=Callback(url="http://127.0.0.1:8080/hook")).model_dump_json().encode()
    no = await service.handle_command(ANY_POOL, "check-callback", check, "planner-1")
    assert isinstance(no, Rejected) and no.field == "pool.callback" and no.reason.startswith("127.0.0.1 is a loopback address")
    fine = CheckCallback(callback=Callback(url="https://ci.example/hooks")).model_dump_json().encode()
    assert await service.handle_command(ANY_POOL, "check-callback", fine, "planner-1") == PoolAnswer(state="allowed")
    assert len(log.records) == before and ANY_POOL not in service.pools
    await service.close()
