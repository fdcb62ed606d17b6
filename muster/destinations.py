"""Where a POST to a URL a tenant chose may go (pure; decision 38): webhooks, pool callbacks.

A webhook's or a pool callback's URL is a tenant's choice, and the service POSTs from inside the
deployment: to a loopback, private, link-local (a cloud's metadata service, 169.254.169.254),
multicast, unspecified or otherwise non-public address it would reach what the tenant cannot,
and the recorded outcome of each attempt (refused, timed out, HTTP 404) would tell the tenant
what answers there. So such an address is refused unless the operator allows it, by host name or
by address range (`muster up --webhook-allow`, one setting for both services). The rule is
applied to the addresses a name resolves to, at the moment of connecting (`muster.checked_http`:
a name that resolves to 127.0.0.1, or a DNS answer that changes between a check and the
connection, gets nowhere), and such a POST is never redirected.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

ALLOW_OPTION = "--webhook-allow"
ALLOW_ENV = "MUSTER_WEBHOOK_ALLOW"
DOC = 'docs/governance.md, "Where webhooks may go"'


@dataclass(frozen=True)
class Sender:
    """Who sends what, as a refusal says it: how its operator allows more, and where that is told."""

    sends: str
    """`the notifier sends webhooks`"""
    command: str
    """the service's own command, which takes ALLOW_OPTION too"""
    doc: str


NOTIFIER = Sender("the notifier sends webhooks", "muster notifier", DOC)
POOL = Sender("the pool service sends callbacks", "muster pool serve", 'docs/pools.md, "Where callbacks may go"')

_RANGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("loopback", ("127.0.0.0/8", "::1/128")),
    ("unspecified", ("0.0.0.0/8", "::/128")),
    ("link-local", ("169.254.0.0/16", "fe80::/10")),
    ("private", ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")),
    ("shared (carrier-grade NAT)", ("100.64.0.0/10",)),
    ("multicast", ("224.0.0.0/4", "ff00::/8")),
)
CATEGORIES: tuple[tuple[str, tuple[Network, ...]], ...] = tuple(
    (name, tuple(ipaddress.ip_network(n) for n in nets)) for name, nets in _RANGES)
"""The ranges refused by name; any other address that is not public (`is_global`: documentation,
benchmarking, reserved, broadcast) is refused as `reserved`."""
_EMBEDDING = (ipaddress.ip_network("::ffff:0:0/96"), ipaddress.ip_network("::/96"), ipaddress.ip_network("64:ff9b::/96"),
              ipaddress.ip_network("64:ff9b:1::/48"))
"""IPv6 forms that carry an IPv4 address in their last 32 bits (mapped, compatible, NAT64): judged
by the IPv4 address they reach. 6to4 (2002::/16) carries it in bits 16-48."""


def _embedded(ip: Address) -> ipaddress.IPv4Address | None:
    if not isinstance(ip, ipaddress.IPv6Address) or ip in (ipaddress.IPv6Address("::"), ipaddress.IPv6Address("::1")):
        return None
    if ip.sixtofour is not None:
        return ip.sixtofour
    if any(ip in net for net in _EMBEDDING):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def category(ip: Address) -> str | None:
    """What kind of non-public address `ip` is (the rule that refuses it); None: a public one."""
    inner = _embedded(ip)
    if inner is not None:
        return category(inner)
    if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id:
        ip = ipaddress.IPv6Address(str(ip).split("%", 1)[0])
    for name, nets in CATEGORIES:
        if any(ip in net for net in nets):
            return name
    return None if ip.is_global else "reserved"


def literal(host: str) -> Address | None:
    """The address a URL's host is, when it is one (`[::1]` as yarl and urlsplit give it: `::1`)."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


class AllowError(ValueError):
    pass


@dataclass(frozen=True)
class Allowed:
    """The operator's allowlist: address ranges (`10.1.0.0/16`, `127.0.0.1`) and host names
    (`alerts.internal`, or `*.corp.example` for the names under it). A name allowed is trusted
    whatever it resolves to (the operator's DNS); a range, for the addresses in it."""

    networks: tuple[Network, ...] = ()
    names: tuple[str, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> Allowed:
        networks: list[Network] = []
        names: list[str] = []
        for raw in (e.strip() for entry in entries for e in entry.replace(",", " ").split()):
            try:
                networks.append(ipaddress.ip_network(raw.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            name = raw.lower().rstrip(".")
            bare = name.removeprefix("*.")
            if not bare or not all(part and len(part) <= 63 and part.replace("-", "").replace("_", "").isalnum()
                                   for part in bare.split(".")):
                raise AllowError(f"{ALLOW_OPTION} {raw!r} is neither an address, an address range (10.0.0.0/8) nor a host "
                                 "name (alerts.internal, *.corp.example)")
            names.append(name)
        return cls(tuple(networks), tuple(names))

    def name(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return any(host == n or (n.startswith("*.") and host.endswith(n[1:])) for n in self.names)

    def address(self, ip: Address) -> bool:
        inner = _embedded(ip)
        return any(ip in net or (inner is not None and inner in net) for net in self.networks)

    def __str__(self) -> str:
        return ", ".join([*(str(n) for n in self.networks), *self.names]) or "nothing"


class DestinationRefused(Exception):
    """A POST the rule refuses: no retry can deliver it (until the operator allows it and starts
    the service again), so the attempt is the last."""


def refused(allowed: Allowed, host: str, addresses: Iterable[Address]) -> str | None:
    """The rule that refuses sending to `host` at `addresses` (those its name resolved to, or the
    address it is), or None."""
    if allowed.name(host):
        return None
    for ip in addresses:
        why = category(ip)
        if why is not None and not allowed.address(ip):
            return why
    return None


def explain(why: str, host: str, shown: str | None = None, sender: Sender = NOTIFIER) -> str:
    """The refusal as a tenant reads it (in the answer to `notify add` or a create, in the
    attempt). `shown`: how to name the host; a URL given by reference is a credential, so for it
    the host is not said. Never the address a name resolved to (the tenant's view of the
    deployment's DNS)."""
    said = shown if shown is not None else host
    a = "an" if why[0] in "aeiou" else "a"
    where = f"{said} is {a} {why} address" if literal(host) is not None else f"{said} resolves to {a} {why} address"
    if shown is not None and shown != host:
        where = f"{said} names {a} {why} address"
    metadata = " (a cloud's metadata service answers at 169.254.169.254)" if why == "link-local" else ""
    hint = f"{ALLOW_OPTION} {host}" if shown is None else f"{ALLOW_OPTION} <its host>"
    return (f"{where}{metadata}: {sender.sends} to public addresses only, unless the operator allows "
            f"others (`muster up {hint}`, or `{sender.command} {ALLOW_OPTION}`, ${ALLOW_ENV}; {sender.doc})")
