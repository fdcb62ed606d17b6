"""Where a POST to a URL a tenant chose may go (pure; decision 38): webhooks, pool callbacks.

A webhook's or a pool callback's URL is a tenant's choice, and the service POSTs from inside the
deployment: to a loopback, private, link-local (a cloud's metadata service, 169.254.169.254),
multicast, unspecified or otherwise non-public address it would reach what the tenant cannot,
and the recorded outcome of each attempt (refused, timed out, HTTP 404) would tell the tenant
what answers there. So such an address is refused unless the operator allows it, by host name or
by address range, on every port or one (`muster up --webhook-allow`, one setting for every
service that checks). The rule is applied to the addresses a name resolves to, at the moment of
connecting (`muster.checked_http`: a name that resolves to 127.0.0.1, or a DNS answer that
changes between a check and the connection, gets nowhere), and such a POST is never redirected.
What a tenant is told of a name is only that it does not resolve to a public address now: never
whether it resolves inside the deployment or not at all (`explain`).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from yarl import URL

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

ALLOW_OPTION = "--webhook-allow"
_TENANT = re.compile(r"[A-Za-z0-9_\-]{1,128}")
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
    running: str = ""
    """how a running one is given more (its allow file, read again on `muster reload`)"""


RUNNING = ", or while it runs a line of its webhook-allow file and `muster reload`"
"""The notifier, the pool service and the planners read the same allow file again (muster/allowfile.py)."""
NOTIFIER = Sender("the notifier sends webhooks", "muster notifier", DOC, RUNNING)
POOL = Sender("the pool service sends callbacks", "muster pool serve", 'docs/pools.md, "Where callbacks may go"', RUNNING)
PLANNER = Sender(POOL.sends, "muster planner", POOL.doc, RUNNING)
"""A callback checked by the planner, with the same setting, when no pool service answers."""

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


SCHEMES = {"http": 80, "https": 443}
"""The schemes a POST may use, and the port each connects to when the URL names none."""


def _port(raw: str, text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise AllowError(f"{ALLOW_OPTION} {raw!r}: the port {text!r} is not a number from 1 to 65535")
    return int(text)


def _split_port(raw: str) -> tuple[str, int | None]:
    """`HOST:PORT`, `CIDR:PORT`, `[IPv6]:PORT` or `[IPv6/len]:PORT` -> (what, port); no port: every one.
    An IPv6 address or range without brackets has no port (its colons are its own)."""
    if raw.startswith("["):
        end = raw.find("]")
        if end < 0:
            raise AllowError(f"{ALLOW_OPTION} {raw!r}: '[' without its ']' (an IPv6 address with a port: [fd00::1]:8080)")
        what, rest = raw[1:end], raw[end + 1:]
        try:
            ipaddress.IPv6Network(what, strict=False)
        except ValueError:
            raise AllowError(f"{ALLOW_OPTION} {raw!r}: brackets hold an IPv6 address or range ([fd00::1]:8080, "
                             "[fd00::/8]:8080)") from None
        if rest and not rest.startswith(":"):
            raise AllowError(f"{ALLOW_OPTION} {raw!r}: after ']' comes ':PORT' or nothing")
        return what, _port(raw, rest[1:]) if rest else None
    if raw.count(":") == 1:
        what, port = raw.split(":")
        return what, _port(raw, port)
    return raw, None


def _with_port(what: str, port: int | None) -> str:
    if port is None:
        return what
    return f"[{what}]:{port}" if ":" in what else f"{what}:{port}"


@dataclass(frozen=True)
class Allowed:
    """The operator's allowlist: address ranges (`10.1.0.0/16`, `127.0.0.1`) and host names
    (`alerts.internal`, or `*.corp.example` for the names under it), each on every port or on one
    (`10.1.0.0/16:8443`, `alerts.internal:9000`, `[fd00::1]:8080`). A name allowed is trusted
    whatever it resolves to (the operator's DNS); a range, for the addresses in it."""

    networks: tuple[tuple[Network, int | None], ...] = ()
    names: tuple[tuple[str, int | None], ...] = ()
    tenants: tuple[tuple[str, Allowed], ...] = ()
    """Entries of one tenant's (`acme=hooks.acme.internal:443`): open to that tenant's webhooks
    only, besides the entries above, which are open to every tenant (`for_tenant`)."""

    @classmethod
    def parse(cls, entries: Iterable[str]) -> Allowed:
        networks: list[tuple[Network, int | None]] = []
        names: list[tuple[str, int | None]] = []
        tenants: dict[str, list[str]] = {}
        for raw in (e.strip() for entry in entries for e in entry.replace(",", " ").split()):
            if "=" in raw:  # (no host name, address or range holds one)
                tenant, _, rest = raw.partition("=")
                if not _TENANT.fullmatch(tenant) or not rest or "=" in rest:
                    raise AllowError(f"{ALLOW_OPTION} {raw!r}: a tenant's entry is TENANT=HOST|CIDR[:PORT] (acme=hooks.acme.internal:443), "
                                     "a tenant being 1-128 letters, digits, '-' or '_'")
                tenants.setdefault(tenant, []).append(rest)
                continue
            if "://" in raw:  # a URL: its scheme's colon is no port's
                raise AllowError(f"{ALLOW_OPTION} {raw!r} is neither an address, an address range (10.0.0.0/8) nor a host "
                                 "name (alerts.internal, *.corp.example), each with an optional :PORT")
            what, port = _split_port(raw)
            try:
                networks.append((ipaddress.ip_network(what, strict=False), port))
                continue
            except ValueError:
                pass
            name = what.lower().rstrip(".")
            bare = name.removeprefix("*.")
            if not bare or not all(part and len(part) <= 63 and part.replace("-", "").replace("_", "").isalnum()
                                   for part in bare.split(".")):
                raise AllowError(f"{ALLOW_OPTION} {raw!r} is neither an address, an address range (10.0.0.0/8) nor a host "
                                 "name (alerts.internal, *.corp.example), each with an optional :PORT")
            names.append((name, port))
        return cls(tuple(networks), tuple(names), tuple((t, cls.parse(said)) for t, said in sorted(tenants.items())))

    def for_tenant(self, tenant: str) -> Allowed:
        """What a webhook of `tenant` may reach besides public addresses: the entries open to every
        tenant and its own. Another tenant's entry is not among them: an operator who allows a
        receiver inside the deployment for acme lets no other tenant's webhooks reach it (or learn
        from their attempts' outcomes what answers there)."""
        own = [a for t, a in self.tenants if t == tenant]
        return Allowed(self.networks + tuple(n for a in own for n in a.networks), self.names + tuple(n for a in own for n in a.names))

    def name(self, host: str, port: int | None = None) -> bool:
        """Whether `host` is allowed by name on `port` (None: not known, so only an entry of every port)."""
        host = host.lower().rstrip(".")
        return any((host == n or (n.startswith("*.") and host.endswith(n[1:]))) and p in (None, port)
                   for n, p in self.names)

    def address(self, ip: Address, port: int | None = None) -> bool:
        inner = _embedded(ip)
        return any((ip in net or (inner is not None and inner in net)) and p in (None, port) for net, p in self.networks)

    def __str__(self) -> str:
        return ", ".join([*(_with_port(str(n), p) for n, p in self.networks), *(_with_port(n, p) for n, p in self.names),
                          *(f"{t}={e}" for t, a in self.tenants for e in str(a).split(", "))]) or "nothing"


class DestinationRefused(Exception):
    """A POST to an address the rule refuses: no retry can deliver it (until the operator allows
    it and starts the service again), so the attempt is the last."""


def refused(allowed: Allowed, host: str, addresses: Iterable[Address], port: int | None = None) -> str | None:
    """The rule that refuses sending to `host`:`port` at `addresses` (those its name resolved to,
    or the address it is), or None."""
    if allowed.name(host, port):
        return None
    for ip in addresses:
        why = category(ip)
        if why is not None and not allowed.address(ip, port):
            return why
    return None


def printable(url: str) -> str:
    """A URL as a log, an error or a console line may say it: no user or password, no query or
    fragment (where a token or a collector's key is put when not in a header)."""
    parts = urlsplit(url)
    if not parts.netloc:
        return url.split("?", 1)[0].split("#", 1)[0].rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, parts.netloc.rsplit("@", 1)[-1], parts.path, "", ""))


def target(url: str) -> tuple[str, int] | str:
    """The host and port a POST to `url` connects to, or what keeps it from having them (the
    same words for every sender, and for the planner that checks a callback before them)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "its port is not a number from 1 to 65535"
    if parts.scheme not in SCHEMES:
        return "it is not an http(s) URL"
    if not parts.hostname:
        return "it names no host"
    if port == 0:
        return "its port is not a number from 1 to 65535"
    # The rule must judge what the POST reaches, which is what aiohttp's parser (yarl) reads: it
    # maps a host's Unicode to ASCII (IDNA), so '①②⑦.0.0.1' or '127。0。0。1', a name to urlsplit
    # (only warned of), is 127.0.0.1 to it, connected to without the checking resolver.
    try:
        sent = URL(url)
        sent_port = sent.port
    except ValueError:
        return "it is not a URL the sender can read"
    host = sent.raw_host or ""
    if not host:
        return "it names no host"
    same = (literal(host) or host) == (literal(parts.hostname) or parts.hostname)
    return parts.hostname if same else host, sent_port or SCHEMES[parts.scheme]  # (urlsplit's as written, if the same)


def explain(why: str | None, host: str, shown: str | None = None, sender: Sender = NOTIFIER, port: int | None = None) -> str:
    """Why a POST to `host` is not sent, as a tenant reads it (in the answer to `notify add` or a
    create, in an attempt). `shown`: how to name the host; a URL given by reference is a
    credential, so for it the host is not said.

    An address the tenant wrote is refused by its rule's name (`why`): that tells nothing the
    tenant did not know. A name is said only not to resolve to a public address now, whether it
    does not resolve at all or resolves to an address the rule refuses (`why` is not said): which
    of the two, and the address, would tell a tenant the deployment's DNS and network."""
    said = shown if shown is not None else host
    if literal(host) is None:
        where = f"{said} does not resolve to a public address now"
    else:
        assert why is not None
        a = "an" if why[0] in "aeiou" else "a"
        where = f"{said} names {a} {why} address" if shown is not None and shown != host else f"{said} is {a} {why} address"
        if why == "link-local":
            where += " (a cloud's metadata service answers at 169.254.169.254)"
    entry = "<its host>" if shown is not None else _with_port(host.strip("[]"), port)
    return (f"{where}: {sender.sends} to public addresses only, unless the operator allows others "
            f"(`muster up {ALLOW_OPTION} {entry}`{sender.running}, or `{sender.command} {ALLOW_OPTION}`, ${ALLOW_ENV}; {sender.doc})")


def refused_url(url: str, allowed: Allowed, sender: Sender = NOTIFIER) -> tuple[str, bool]:
    """(what refuses a POST to `url` without resolving anything: its form, or the address it names
    ('' if nothing), whether its host is a name: the rule then needs the name resolved, at the
    sender)."""
    where = target(url)
    if isinstance(where, str):
        return f"{url.split('?', 1)[0]}: {where}", False  # (no query: it may carry a token)
    host, port = where
    ip = literal(host)
    if ip is None:
        return "", True
    why = refused(allowed, host, [ip], port)
    return (explain(why, host, sender=sender, port=port) if why else ""), False
