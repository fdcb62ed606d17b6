"""Where a webhook may go (decision 38): loopback, private, link-local, multicast, unspecified
and other non-public addresses are refused, also in the IPv6 forms that carry an IPv4 address,
unless the operator allows a host name or an address range, on every port or one; the refusal of
an address names the rule and how the operator allows it; a name is said only not to resolve to a
public address, never whether it resolves inside or not at all, nor the address; the host of a
URL given by reference is never said. The notifier's secrets are each tenant's own or shared,
never another tenant's."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime
from typing import Any

import pytest

from contracts.governance import Subscription
from contracts.notifications import NotificationAttempted
from muster.destinations import (
    Allowed,
    AllowError,
    DestinationRefused,
    category,
    explain,
    refused,
    target,
)
from muster.ports.memory import ManualClock, MemoryEventLog
from services.notifier.app import Notifier
from services.notifier.domain.secrets import NotifierSecrets, SecretsFileError


@pytest.mark.parametrize(("address", "rule"), [
    ("127.0.0.1", "loopback"), ("127.8.9.10", "loopback"), ("::1", "loopback"),
    ("10.1.2.3", "private"), ("172.16.0.1", "private"), ("172.31.255.255", "private"), ("192.168.1.1", "private"),
    ("fd00::1", "private"),
    ("169.254.169.254", "link-local"), ("fe80::1", "link-local"), ("fe80::1%eth0", "link-local"),
    ("224.0.0.1", "multicast"), ("239.255.255.250", "multicast"), ("ff02::1", "multicast"),
    ("0.0.0.0", "unspecified"), ("0.1.2.3", "unspecified"), ("::", "unspecified"),
    ("100.64.0.1", "shared (carrier-grade NAT)"),
    ("192.0.2.1", "reserved"), ("255.255.255.255", "reserved"), ("240.0.0.1", "reserved"),
    # IPv6 forms that reach an IPv4 address: judged by it
    ("::ffff:127.0.0.1", "loopback"), ("::ffff:169.254.169.254", "link-local"), ("::127.0.0.1", "loopback"),
    ("2002:7f00:1::", "loopback"), ("64:ff9b::a00:1", "private"),
])
def test_a_non_public_address_is_refused_naming_its_rule(address: str, rule: str) -> None:
    assert category(ipaddress.ip_address(address)) == rule


@pytest.mark.parametrize("address", ["8.8.8.8", "93.184.216.34", "172.32.0.1", "2606:4700::1111", "::ffff:8.8.8.8"])
def test_a_public_address_is_taken(address: str) -> None:
    assert category(ipaddress.ip_address(address)) is None


def test_the_operator_allows_host_names_and_address_ranges() -> None:
    allowed = Allowed.parse(["10.0.0.0/8, 127.0.0.1", "alerts.internal", "*.corp.example", "[::1]"])
    ip = ipaddress.ip_address
    assert refused(allowed, "10.9.9.9", [ip("10.9.9.9")]) is None
    assert refused(allowed, "hooks.example", [ip("127.0.0.1")]) is None  # a name resolving into an allowed range
    assert refused(allowed, "x", [ip("::ffff:127.0.0.1")]) is None and refused(allowed, "x", [ip("::1")]) is None
    assert refused(allowed, "ALERTS.internal.", [ip("192.168.1.1")]) is None  # a name allowed: whatever it resolves to
    assert refused(allowed, "a.b.corp.example", [ip("192.168.1.1")]) is None
    assert refused(allowed, "corp.example", [ip("192.168.1.1")]) == "private"  # `*.` is the names under it
    assert refused(allowed, "hooks.example", [ip("8.8.8.8"), ip("192.168.1.1")]) == "private"  # any address refused: refused
    assert refused(Allowed(), "8.8.8.8", [ip("8.8.8.8")]) is None
    assert str(Allowed()) == "nothing"
    for bad in ("http://x", "a..b", "*.", "10.0.0.0/40x", "a b/c"):
        with pytest.raises(AllowError, match="--webhook-allow"):
            Allowed.parse([bad])


def test_a_refusal_names_the_rule_and_the_operators_setting_and_hides_what_it_should() -> None:
    said = explain("link-local", "169.254.169.254", port=80)
    assert said.startswith("169.254.169.254 is a link-local address (a cloud's metadata service answers at 169.254.169.254)")
    assert "muster up --webhook-allow 169.254.169.254:80" in said and "$MUSTER_WEBHOOK_ALLOW" in said
    assert "--webhook-allow [::1]:8080`" in explain("loopback", "::1", port=8080)
    hidden = explain("private", "10.0.0.5", "the URL of secret://chat-url")
    assert hidden.startswith("the URL of secret://chat-url names a private address") and "10.0.0.5" not in hidden
    assert "--webhook-allow <its host>" in hidden


def test_a_name_is_said_not_to_resolve_to_a_public_address_whether_it_resolves_inside_or_not_at_all() -> None:
    """Which of the two, or the rule that refuses it, would tell a tenant the deployment's DNS."""
    inside = explain("loopback", "hooks.example", port=443)
    nowhere = explain(None, "hooks.example", port=443)
    assert inside == nowhere and inside.startswith("hooks.example does not resolve to a public address now: ")
    assert "loopback" not in inside and "muster up --webhook-allow hooks.example:443" in inside
    hidden = explain("private", "slack.internal", "the URL of secret://chat-url")
    assert hidden == explain(None, "slack.internal", "the URL of secret://chat-url")
    assert hidden.startswith("the URL of secret://chat-url does not resolve to a public address now") and "slack" not in hidden


def test_an_allowed_entry_may_open_one_port_only() -> None:
    ip = ipaddress.ip_address
    allowed = Allowed.parse(["10.0.0.0/8:8443", "127.0.0.1", "[::1]:9000", "fd00::/8", "[fd01::/16]", "alerts.internal:80",
                             "*.corp.example:8080,hooks.lan"])
    assert str(allowed) == ("10.0.0.0/8:8443, 127.0.0.1/32, [::1/128]:9000, fd00::/8, fd01::/16, alerts.internal:80, "
                            "*.corp.example:8080, hooks.lan")
    assert refused(allowed, "10.1.2.3", [ip("10.1.2.3")], 8443) is None
    assert refused(allowed, "10.1.2.3", [ip("10.1.2.3")], 22) == "private"  # the range, on its one port only
    assert refused(allowed, "127.0.0.1", [ip("127.0.0.1")], 22) is None  # no port: every one (the older form)
    assert refused(allowed, "::1", [ip("::1")], 9000) is None and refused(allowed, "::1", [ip("::1")], 9001) == "loopback"
    assert refused(allowed, "x", [ip("fd00::5")], 1) is None and refused(allowed, "x", [ip("fd01::5")], 1) is None
    assert refused(allowed, "alerts.internal", [ip("10.0.0.9")], 80) is None
    assert refused(allowed, "alerts.internal", [ip("10.0.0.9")], 8443) is None  # the name's port is not, the range's is
    assert refused(allowed, "alerts.internal", [ip("192.168.0.9")], 8443) == "private"
    assert refused(allowed, "a.corp.example", [ip("192.168.0.9")], 8080) is None
    assert refused(allowed, "a.corp.example", [ip("192.168.0.9")], 80) == "private"
    assert refused(allowed, "hooks.lan", [ip("192.168.0.9")], 1) is None
    assert refused(allowed, "10.1.2.3", [ip("10.1.2.3")]) == "private"  # a port not known: only an entry of every port
    for bad, said in [("10.0.0.1:0", "the port '0' is not a number from 1 to 65535"),
                      ("alerts.internal:99999", "the port '99999' is not a number from 1 to 65535"),
                      ("alerts.internal:", "the port '' is not a number"), ("alerts.internal:http", "the port 'http'"),
                      ("[::1", "'[' without its ']'"), ("[::1]8080", "after ']' comes ':PORT' or nothing"),
                      ("[alerts.internal]:80", "brackets hold an IPv6 address or range"),
                      ("http://alerts:80", "is neither an address"), ("a:b:c", "is neither an address")]:
        with pytest.raises(AllowError) as err:
            Allowed.parse([bad])
        assert str(err.value).startswith(f"--webhook-allow {bad!r}") and said in str(err.value), err.value


@pytest.mark.parametrize(("url", "reached"), [
    ("http://\u2460\u2461\u2466.0.0.1:8080/x", ("127.0.0.1", 8080)), ("http://127\u30020\u30020\u30021/", ("127.0.0.1", 80)),
    ("https://\uff11\uff16\uff19.254.169.254/", ("169.254.169.254", 443)), ("https://B\u00fccher.example/", ("xn--bcher-kva.example", 443)),
    ("http://Hooks.Example:018080/x", ("hooks.example", 18080)), ("http://[::ffff:127.0.0.1]:9/", ("::ffff:127.0.0.1", 9)),
])
def test_the_host_and_port_judged_are_those_the_post_reaches(url: str, reached: tuple[str, int]) -> None:
    """As aiohttp's parser reads them: an address in Unicode characters is that address (to
    urlsplit it was a name, only warned of, then connected to without the checking resolver)."""
    assert target(url) == reached
    assert target("http://a\\@127.0.0.1/") == "it is not a URL the sender can read"


def test_a_tenant_names_its_own_secrets_or_the_shared_ones_never_another_tenants() -> None:
    secrets = NotifierSecrets.of({"@secrets": {"shared": "s", "hook": "shared-hook"},
                                  "@tenants": {"a": {"hook": "a-hook", "chat": "a-chat"}}, "aws": {"api_user": "x"}})
    assert secrets.value("a", "secret://hook") == ("a-hook", "")  # its own shadows the shared one
    assert secrets.value("b", "secret://hook") == ("shared-hook", "")
    assert secrets.value("b", "secret://shared") == ("s", "")
    value, why = secrets.value("b", "secret://chat")
    assert value == "" and why == "secret 'chat' is not in the notifier's secrets file (under '@secrets', or '@tenants' → 'b')"
    assert secrets.value("b", "secret://nowhere")[1] == why.replace("'chat'", "'nowhere'")  # the same words: no tell
    with pytest.raises(SecretsFileError, match="@tenants"):
        NotifierSecrets.of({"@tenants": {"a": "flat"}})
    with pytest.raises(SecretsFileError, match="@secrets"):
        NotifierSecrets.of({"@secrets": ["x"]})


async def test_a_refused_destination_is_tried_once_and_not_again() -> None:
    """A refusal is the operator's rule, not a receiver that is down: no retry would go through."""
    tries: list[str] = []

    async def deliver(tenant: str, sub: Subscription, body: dict[str, Any], nid: str) -> tuple[bool, int | None, str]:
        tries.append(nid)
        raise DestinationRefused(explain("loopback", "127.0.0.1"))

    clock = ManualClock(datetime(2026, 11, 28, 12, tzinfo=UTC))
    log = MemoryEventLog(clock)
    hook = Subscription.model_validate({"name": "hook", "events": ["job_failed"],
                                        "webhook": {"url": "http://127.0.0.1:9/x", "secret": "secret://hook"}})
    notifier = Notifier(log, deliver, clock, lambda tenant: [hook])
    outcome = await notifier.queue_test("a", hook, "hook-test-1")
    assert isinstance(outcome, NotificationAttempted)
    assert not outcome.ok and outcome.final and outcome.next_at is None and "loopback" in outcome.error
    assert notifier.owed == {} and notifier.timers == {}
    await clock.advance(3600)
    assert tries == ["hook-test-1"]


def test_a_tenants_entry_opens_that_tenants_webhooks_only() -> None:
    allowed = Allowed.parse(["10.1.0.0/16:443, acme=127.0.0.1:9000 acme=hooks.acme.internal", "beta=[fd00::1]:80"])
    assert str(allowed) == "10.1.0.0/16:443, acme=127.0.0.1/32:9000, acme=hooks.acme.internal, beta=[fd00::1/128]:80"
    loopback = ipaddress.ip_address("127.0.0.1")
    assert not allowed.address(loopback, 9000) and not allowed.name("hooks.acme.internal")  # (pool callbacks: shared entries only)
    acme, beta, other = allowed.for_tenant("acme"), allowed.for_tenant("beta"), allowed.for_tenant("gamma")
    assert acme.address(loopback, 9000) and acme.name("hooks.acme.internal") and acme.address(ipaddress.ip_address("10.1.2.3"), 443)
    assert not beta.address(loopback, 9000) and not beta.name("hooks.acme.internal") and beta.address(ipaddress.ip_address("fd00::1"), 80)
    assert not other.address(loopback, 9000) and str(other) == "10.1.0.0/16:443"
    for bad in ("=127.0.0.1", "acme=", "acme=x=y", "ac/me=127.0.0.1"):
        with pytest.raises(AllowError, match="a tenant's entry is TENANT=HOST"):
            Allowed.parse([bad])
    with pytest.raises(AllowError, match="the port 'http'"):
        Allowed.parse(["acme=alerts.internal:http"])
