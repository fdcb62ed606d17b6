"""Where the pool service may POST a callback (decision 38, docs/pools.md "Where callbacks may
go"): the notifier's rule, the operator's one setting. A URL naming an address inside the
deployment is refused when the request comes, in words that name the rule and the setting; a name
that does not resolve to a public address is a warning, in the same words whether it resolves
inside or not at all; a POST is checked again at the connection: to a refused address it is never
made nor retried, to such a name it fails like any other attempt, said alike."""

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
])
async def test_a_callback_to_an_address_inside_the_deployment_is_refused_naming_the_rule_and_the_setting(url: str, said: str) -> None:
    problem, warning = await sender().check(Callback(url=url), "acme")
    assert problem.startswith(said) and warning == ""
    assert "the pool service sends callbacks to public addresses only" in problem
    assert "`muster pool serve --webhook-allow`" in problem and "$MUSTER_WEBHOOK_ALLOW" in problem and "docs/pools.md" in problem


@pytest.mark.parametrize("url", ["https://hooks.internal/pool", "http://sneaky.example/pool", "https://nowhere.example/pool"])
async def test_a_name_that_does_not_resolve_to_a_public_address_is_a_warning_that_does_not_tell_why(url: str) -> None:
    """Resolving to a private or loopback address, or not at all, read the same: which of these
    it is would tell a tenant the deployment's DNS."""
    host = url.split("/")[2]
    problem, warning = await sender().check(Callback(url=url), "acme")
    port = 443 if url.startswith("https") else 80
    assert problem == "" and warning == (
        f"{host} does not resolve to a public address now: the pool service sends callbacks to public addresses only, unless "
        f"the operator allows others (`muster up --webhook-allow {host}:{port}`, or while it runs a line of its webhook-allow file and `muster reload`, "
        f"or `muster pool serve --webhook-allow`, "
        f"$MUSTER_WEBHOOK_ALLOW; docs/pools.md, \"Where callbacks may go\"); every callback fails until it does")
    assert "10.1.2.3" not in warning and "private" not in warning and "loopback" not in warning


async def test_a_malformed_url_is_refused_naming_what_is_wrong() -> None:
    assert await sender().check(Callback(url="http://ci.example:http/x?token=t"), "acme") == (
        "http://ci.example:http/x: its port is not a number from 1 to 65535", "")
    assert (await sender().check(Callback(url="http:///x"), "acme"))[0] == "http:///x: it names no host"


async def test_what_the_operator_allows_and_public_addresses_are_taken_and_a_bus_subject_is_not_a_url() -> None:
    allowed = sender(Allowed.parse(["127.0.0.1", "hooks.internal"]))
    assert await allowed.check(Callback(url="http://127.0.0.1:8080/hook"), "acme") == ("", "")
    assert await allowed.check(Callback(url="https://hooks.internal/pool"), "acme") == ("", "")
    assert await sender().check(Callback(url="https://ci.example/hooks/pool"), "acme") == ("", "")
    assert await sender().check(Callback(subject="muster.cb.acme.r1"), "acme") == ("", "")


async def test_a_post_to_a_refused_address_is_never_made_nor_retried() -> None:
    s = sender()
    attempts, error = await s.send(Callback(url="http://127.0.0.1:9/hook"), {"type": "granted"}, "acme")
    assert attempts == 1 and error.startswith("refused: 127.0.0.1 is a loopback address")
    assert isinstance(s.resolver, Answers) and s.resolver.asked == []
    await s.close()


async def test_a_post_to_a_name_inside_fails_at_the_connection_like_one_that_does_not_resolve() -> None:
    """Refused at the connection (never made), tried again as any failed attempt, in the same words."""
    s = sender()
    inside = await s.send(Callback(url="http://sneaky.example:9/hook"), {"type": "granted"}, "acme")
    nowhere = await s.send(Callback(url="http://nowhere.example:9/hook"), {"type": "granted"}, "acme")
    assert inside == (5, nowhere[1].replace("nowhere", "sneaky")) and nowhere[0] == 5
    assert inside[1].startswith("sneaky.example does not resolve to a public address now") and "loopback" not in inside[1]
    assert isinstance(s.resolver, Answers) and s.resolver.asked == ["sneaky.example"] * 5 + ["nowhere.example"] * 5
    await s.close()


def test_the_sender_is_made_outside_a_loop() -> None:
    """(aiohttp's resolver needs a running loop: the checked one is made on first use)"""
    assert CallbackSender(None).allowed == Allowed()  # type: ignore[arg-type]


async def test_an_entry_of_one_tenants_opens_its_callbacks_only_as_its_webhooks() -> None:
    """`--webhook-allow acme=HOST` refused acme's own callback there (the pool service read the
    entries of every tenant only), while the notifier sent acme's webhooks there; another tenant
    is refused it as if nothing allowed it, at the check and at the POST."""
    s = sender(Allowed.parse(["acme=127.0.0.1:8080", "acme=hooks.internal", "10.9.0.0/16"]))
    assert await s.check(Callback(url="http://127.0.0.1:8080/hook"), "acme") == ("", "")
    assert await s.check(Callback(url="https://hooks.internal/pool"), "acme") == ("", "")
    mine = await sender().check(Callback(url="http://127.0.0.1:8080/hook"), "beta")
    theirs = await s.check(Callback(url="http://127.0.0.1:8080/hook"), "beta")
    assert theirs == mine and theirs[0].startswith("127.0.0.1 is a loopback address")
    assert (await s.check(Callback(url="https://hooks.internal/pool"), "beta"))[1].startswith(
        "hooks.internal does not resolve to a public address now")
    assert await s.check(Callback(url="http://10.9.1.1/x"), "beta") == ("", "")  # an entry of every tenant's
    attempts, error = await s.send(Callback(url="http://127.0.0.1:8080/hook"), {"type": "granted"}, "beta")
    assert attempts == 1 and error.startswith("refused: 127.0.0.1 is a loopback address")
    inside = await s.send(Callback(url="http://hooks.internal:9/hook"), {"type": "granted"}, "beta")
    assert inside[0] == 5 and inside[1].startswith("hooks.internal does not resolve to a public address now")
    await s.close()


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


async def test_the_pool_service_takes_a_tenants_own_entry_for_its_requests_and_the_planners_check_only() -> None:
    log = MemoryEventLog(ManualClock())
    service = PoolService(nc=None, store=log, sender=sender(Allowed.parse(["acme=127.0.0.1:8080"])))  # type: ignore[arg-type]
    await service.handle_command("p", "add-hosts", AddHosts(hosts=[host(1), host(2)]).model_dump_json().encode(), "root")
    url = "http://127.0.0.1:8080/hook"
    theirs = RequestHosts(request=request("r1", 1, tenant="beta", callback=Callback(url=url)))
    refused = await service.handle_command("p", "request", theirs.model_dump_json().encode(), "root")
    assert isinstance(refused, Rejected) and refused.reason.startswith("callback: 127.0.0.1 is a loopback address")
    mine = RequestHosts(request=request("r2", 1, tenant="acme", callback=Callback(url=url)))
    assert isinstance(await service.handle_command("p", "request", mine.model_dump_json().encode(), "root"), PoolAnswer)
    for tenant, allowed in (("acme", True), ("beta", False), ("", False)):  # '': an older planner's, every tenant's entries
        check = CheckCallback(callback=Callback(url=url), tenant=tenant).model_dump_json().encode()
        said = await service.handle_command(ANY_POOL, "check-callback", check, "planner-1")
        assert isinstance(said, PoolAnswer) is allowed, (tenant, said)
    await service.close()
