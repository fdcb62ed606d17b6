"""Where the notifier's webhooks may go, with real HTTP on loopback (decision 38): by default a
tenant's webhook to the deployment's own addresses (loopback by address or by a name such as
`localhost`, the cloud metadata address, a name whose DNS answer turns private between the check
and the delivery) gets no connection: to an address, refused for good, naming the rule and the
operator's setting; to a name, a failed attempt in the words of a name that does not resolve. An
address, range or name the operator allows, on every port or one, is delivered to; a redirect is
never followed; a URL given by reference is never said. `check` (before `notify add` stores a
subscription) says which secrets the notifier lacks, and warns of a name that does not resolve to
a public address, without saying whether it resolves inside."""

from __future__ import annotations

import asyncio
import socket
from datetime import UTC, datetime

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from contracts.governance import Subscription
from muster.destinations import Allowed, DestinationRefused
from muster.ports.memory import ManualClock
from services.notifier.adapters.delivery import Deliveries
from services.notifier.domain.secrets import NotifierSecrets
from tests.integration.conftest import LOCAL, Webhook

CLOCK = ManualClock(datetime(2026, 11, 30, 12, tzinfo=UTC))


class Answers(AbstractResolver):
    """A DNS that answers each name with the next of its addresses (the last one again after)."""

    def __init__(self, **names: list[str]) -> None:
        self.names = {k.replace("_", "."): v for k, v in names.items()}

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        if host not in self.names:
            raise OSError(f"no such name {host}")
        answers = self.names[host]
        ip = answers.pop(0) if len(answers) > 1 else answers[0]
        return [{"hostname": host, "host": ip, "port": port, "family": socket.AF_INET6 if ":" in ip else socket.AF_INET,
                 "proto": 0, "flags": socket.AI_NUMERICHOST}]

    async def close(self) -> None:
        pass


def hook(url: str, name: str = "ops") -> Subscription:
    return Subscription.model_validate({"name": name, "events": ["job_failed"], "webhook": {"url": url, "secret": "secret://hook"}})


async def send(deliveries: Deliveries, url: str, nid: str = "ops-test-1") -> tuple[bool, int | None, str]:
    try:
        return await deliveries("a", hook(url), {"kind": "test", "text": "hello"}, nid)
    finally:
        await deliveries.close()


@pytest.mark.parametrize("where", ["address", "ipv6", "mapped", "metadata", "unspecified"])
async def test_a_webhook_to_the_deployments_own_addresses_is_refused_by_default(webhook: Webhook, where: str) -> None:
    port = webhook.url.split(":")[2].split("/")[0]
    url, said = {
        "address": (webhook.url, "127.0.0.1 is a loopback address"),
        "ipv6": (f"http://[::1]:{port}/hook", "::1 is a loopback address"),
        "mapped": (f"http://[::ffff:127.0.0.1]:{port}/hook", "::ffff:127.0.0.1 is a loopback address"),
        "metadata": ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address (a cloud's metadata"),
        "unspecified": (f"http://0.0.0.0:{port}/hook", "0.0.0.0 is an unspecified address"),
    }[where]
    with pytest.raises(DestinationRefused) as refused:
        await send(Deliveries(None, {"hook": webhook.secret}, CLOCK), url)
    assert str(refused.value).startswith(said), refused.value
    assert "public addresses only" in str(refused.value) and "muster up --webhook-allow" in str(refused.value)
    assert webhook.got.empty()


UNICODE_LOOPBACK = ["\u2460\u2461\u2466.0.0.1", "127\u30020\u30020\u30021", "\uff11\uff12\uff17.0.0.1"]
"""127.0.0.1 written with characters the URL parser of the POST (yarl, under aiohttp) maps to it
(circled and fullwidth digits, ideographic full stops: IDNA), which urlsplit keeps as a name."""


@pytest.mark.parametrize("host", UNICODE_LOOPBACK)
async def test_an_address_written_in_unicode_is_judged_as_the_address_the_post_reaches(webhook: Webhook, host: str) -> None:
    """Attack (tenant beta, `notify add` then `notify test`): the rule judged the host as
    urlsplit reads it, a name, which the check only warned of; aiohttp read the address and
    connected to it without asking the resolver, to a port the operator did not open."""
    port = int(webhook.url.split(":")[2].split("/")[0])
    other = port + 1 if port < 65535 else port - 1
    url = webhook.url.replace("127.0.0.1", host)
    with pytest.raises(DestinationRefused, match="^127.0.0.1 is a loopback address"):
        await send(Deliveries(None, {"hook": webhook.secret}, CLOCK), url)
    deliveries = Deliveries(None, {"hook": webhook.secret}, CLOCK, allowed=Allowed.parse([f"127.0.0.1:{other}"]))
    (problem,), warnings = await deliveries.check("a", hook(url))
    await deliveries.close()
    assert problem.startswith("subscription 'ops': webhook.url: 127.0.0.1 is a loopback address") and warnings == []
    assert webhook.got.empty()
    # What the operator allows is allowed however it is written.
    assert (await send(Deliveries(None, {"hook": webhook.secret}, CLOCK, allowed=Allowed.parse([f"127.0.0.1:{port}"])), url))[:2] == (True, 204)


async def test_the_addresses_are_checked_when_connecting_not_before(webhook: Webhook) -> None:
    """A name whose DNS answer is public when checked and loopback when connecting (rebinding)
    gets no connection; `localhost` neither. Their attempts fail in the words of a name that does
    not resolve, without the rule or the address (a tenant would learn the deployment's DNS)."""
    port = webhook.url.split(":")[2].split("/")[0]
    dns = Answers(hooks_example=["93.184.216.34", "127.0.0.1"], inside_example=["10.0.0.5"])
    deliveries = Deliveries(None, {"hook": webhook.secret}, CLOCK, resolver=dns)
    assert await deliveries.check("a", hook(f"http://hooks.example:{port}/hook")) == ([], [])
    ok, status, error = await send(deliveries, f"http://hooks.example:{port}/hook")
    assert (ok, status) == (False, None) and error.startswith("hooks.example does not resolve to a public address now: "), error
    assert f"`muster up --webhook-allow hooks.example:{port}`" in error and "loopback" not in error
    inside = await send(Deliveries(None, {"hook": webhook.secret}, CLOCK, resolver=dns), "https://inside.example/x")
    nowhere = await send(Deliveries(None, {"hook": webhook.secret}, CLOCK, resolver=dns), "https://nowhere.example/x")
    assert inside == (False, None, nowhere[2].replace("nowhere", "inside")) and "10.0.0.5" not in inside[2]
    local = await send(Deliveries(None, {"hook": webhook.secret}, CLOCK), webhook.url.replace("127.0.0.1", "localhost"))
    assert local[0] is False and local[2].startswith("localhost does not resolve to a public address now"), local
    assert webhook.got.empty()


async def test_what_the_operator_allows_is_delivered_to(webhook: Webhook) -> None:
    ok, status, error = await send(Deliveries(None, {"hook": webhook.secret}, CLOCK, allowed=LOCAL), webhook.url)
    assert (ok, status, error) == (True, 204, "")
    by_name = Deliveries(None, {"hook": webhook.secret}, CLOCK, allowed=Allowed.parse(["localhost"]))
    assert (await send(by_name, webhook.url.replace("127.0.0.1", "localhost"), "ops-test-2"))[0]
    assert webhook.got.qsize() == 2


async def test_an_allowed_entry_with_a_port_opens_that_port_only(webhook: Webhook) -> None:
    """The operator opens one receiver, not every port of the host or range."""
    port = int(webhook.url.split(":")[2].split("/")[0])
    other = port + 1 if port < 65535 else port - 1
    for entry, host in ((f"127.0.0.1:{port}", "127.0.0.1"), (f"127.0.0.0/8:{port}", "127.0.0.1"), (f"localhost:{port}", "localhost")):
        one = Deliveries(None, {"hook": webhook.secret}, CLOCK, allowed=Allowed.parse([entry]))
        assert (await send(one, webhook.url.replace("127.0.0.1", host), f"ops-test-{host}-{entry}"))[:2] == (True, 204), entry
        with pytest.raises(DestinationRefused, match=f"^127.0.0.1 is a loopback address.*--webhook-allow 127.0.0.1:{other}`"):
            await send(Deliveries(None, {"hook": webhook.secret}, CLOCK, allowed=Allowed.parse([entry])),
                       webhook.url.replace(f":{port}/", f":{other}/"))
    assert webhook.got.qsize() == 3


async def test_an_entry_of_one_tenants_opens_that_tenants_webhooks_only(webhook: Webhook) -> None:
    """Attack: the operator allows a receiver inside the deployment for tenant a (`a=HOST:PORT`);
    tenant b subscribes its own webhook there. Before, an allowed entry was open to every tenant:
    b's events, signed with b's key, were POSTed to a's receiver, and each attempt's outcome told
    b what answers there. Now b's webhook is refused there as if nothing were allowed, by name or
    by address, at `notify add` and at a delivery; a's goes through."""
    port = int(webhook.url.split(":")[2].split("/")[0])
    for entry, host in ((f"a=127.0.0.1:{port}", "127.0.0.1"), (f"a=localhost:{port}", "localhost")):
        allowed = Allowed.parse([entry])
        url = webhook.url.replace("127.0.0.1", host)
        deliveries = Deliveries(None, NotifierSecrets.of({"@secrets": {"hook": webhook.secret}}), CLOCK, allowed=allowed)
        assert await deliveries.check("a", hook(url)) == ([], [])
        problems, warnings = await deliveries.check("b", hook(url))
        assert (problems or warnings) and "public addresses only" in (problems + warnings)[0], (problems, warnings)
        assert (await deliveries("a", hook(url), {"kind": "test"}, f"a-{host}"))[:2] == (True, 204)
        if host == "localhost":  # a name: a failed attempt, in the words of a name that does not resolve
            ok, status, error = await deliveries("b", hook(url), {"kind": "test"}, f"b-{host}")
            assert not ok and status is None and "localhost does not resolve to a public address now" in error, error
        else:
            with pytest.raises(DestinationRefused, match="^127.0.0.1 is a loopback address"):
                await deliveries("b", hook(url), {"kind": "test"}, f"b-{host}")
        await deliveries.close()
    assert webhook.got.qsize() == 2  # tenant a's, by address and by name


async def test_a_redirect_is_not_followed(webhook: Webhook, moved: str) -> None:
    ok, status, error = await send(Deliveries(None, {"hook": webhook.secret}, CLOCK, allowed=LOCAL), moved)
    assert not ok and status == 307, error
    assert error == f"HTTP 307 from {moved}: the notifier does not follow redirects (subscribe the URL it redirects to)"
    assert webhook.got.empty()


async def test_a_url_given_by_reference_is_refused_without_saying_it(webhook: Webhook) -> None:
    secrets = {"hook": webhook.secret, "url": f"{webhook.url}?token=tok"}
    deliveries = Deliveries(None, secrets, CLOCK)
    with pytest.raises(DestinationRefused) as refused:
        await deliveries("a", hook("secret://url"), {"kind": "test"}, "ops-test-1")
    said = str(refused.value)
    assert said.startswith("the URL of secret://url names a loopback address") and "--webhook-allow <its host>" in said
    assert "127.0.0.1" not in said and webhook.url.split(":")[2] not in said and "tok" not in said
    (problem,) = (await deliveries.check("a", hook("secret://url")))[0]
    await deliveries.close()
    assert problem.startswith("subscription 'ops': webhook.url: the URL of secret://url names a loopback address")
    assert "127.0.0.1" not in problem


async def test_the_check_names_the_secrets_the_notifier_lacks_for_this_tenant_only(webhook: Webhook) -> None:
    secrets = NotifierSecrets.of({"@secrets": {"shared": "s"}, "@tenants": {"a": {"hook": "a-key", "url": "https://hooks.example/x"}}})
    deliveries = Deliveries(None, secrets, CLOCK, resolver=Answers(hooks_example=["93.184.216.34"]))
    mine = Subscription.model_validate({"name": "ops", "events": ["job_failed"], "webhook": {"url": "secret://url", "secret": "secret://hook"}})
    assert await deliveries.check("a", mine) == ([], [])
    problems, _ = await deliveries.check("b", mine)  # tenant b names tenant a's secrets: it has none of them
    assert problems == [
        "subscription 'ops': webhook.secret: secret 'hook' is not in the notifier's secrets file (under '@secrets', or '@tenants' → 'b')",
        "subscription 'ops': webhook.url: secret 'url' is not in the notifier's secrets file (under '@secrets', or '@tenants' → 'b')"]
    ok, _, error = await deliveries("b", mine, {"kind": "test"}, "ops-test-2")
    assert not ok and error.startswith("secret 'hook' is not in the notifier's secrets file")
    broken = Deliveries(None, {"hook": "k", "url": "hooks.example/no-scheme", "port": "https://hooks.example:99999/x"}, CLOCK)
    for name in ("url", "port"):
        assert (await broken.check("a", hook(f"secret://{name}"))) == (
            [f"subscription 'ops': webhook.url: secret://{name} does not hold an http(s) URL with a host"], [])
    await broken.close()
    refused, _ = await deliveries.check("a", hook("http://169.254.169.254/latest/meta-data/"))
    assert len(refused) == 1 and refused[0].startswith("subscription 'ops': webhook.url: 169.254.169.254 is a link-local address")
    problems, warnings = await deliveries.check("a", hook("https://nowhere.invalid/x"))
    await deliveries.close()
    assert problems == [] and len(warnings) == 1 and warnings[0].startswith(
        "subscription 'ops': nowhere.invalid does not resolve to a public address now: the notifier sends webhooks to public "
        "addresses only, unless the operator allows others (`muster up --webhook-allow nowhere.invalid:443`")
    assert warnings[0].endswith("; every delivery fails until it does")
    inside = Deliveries(None, secrets, CLOCK, resolver=Answers(hooks_internal=["10.0.0.5"]))
    assert await inside.check("a", hook("https://hooks.internal/x")) == (
        [], [warnings[0].replace("nowhere.invalid", "hooks.internal")])  # resolving inside reads the same
    await inside.close()


async def test_a_bus_subscription_needs_no_check() -> None:
    deliveries = Deliveries(None, {}, CLOCK)
    bus = Subscription.model_validate({"name": "bus", "events": ["job_failed"], "subject": "muster.cb.a.x"})
    assert await deliveries.check("a", bus) == ([], [])
    await deliveries.close()




async def test_a_receiver_that_does_not_answer_is_said_so_with_the_wait() -> None:
    """A receiver that takes the POST and never answers: the attempt's error says how long the
    notifier waited (it said `TimeoutError`, the exception's name, in `notify test` and `notify
    list`: walk of session 26)."""
    held: list[asyncio.StreamWriter] = []

    async def silent(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # reads nothing, answers nothing

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}/slow"
    try:
        ok, status, error = await send(Deliveries(None, {"hook": "s"}, CLOCK, timeout_s=0.5, allowed=LOCAL), url)
    finally:
        for writer in held:
            writer.close()
        server.close()
    assert (ok, status) == (False, None)
    assert error == f"{url}: no answer within 0.5 s", error
