"""Where a webhook may go (decision 38): loopback, private, link-local, multicast, unspecified
and other non-public addresses are refused, also in the IPv6 forms that carry an IPv4 address,
unless the operator allows a host name or an address range; the refusal names the rule and how
the operator allows it, never an address a name resolved to, nor the host of a URL given by
reference. The notifier's secrets are each tenant's own or shared, never another tenant's."""

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
    said = explain("link-local", "169.254.169.254")
    assert said.startswith("169.254.169.254 is a link-local address (a cloud's metadata service answers at 169.254.169.254)")
    assert "muster up --webhook-allow 169.254.169.254" in said and "$MUSTER_WEBHOOK_ALLOW" in said
    resolved = explain("loopback", "hooks.example")
    assert resolved.startswith("hooks.example resolves to a loopback address") and "127.0.0.1" not in resolved
    hidden = explain("private", "slack.internal", "the URL of secret://chat-url")
    assert hidden.startswith("the URL of secret://chat-url names a private address") and "slack.internal" not in hidden
    assert "--webhook-allow <its host>" in hidden


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
