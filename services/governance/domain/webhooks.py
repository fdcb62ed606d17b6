"""What a webhook's URL may hold (pure): the log keeps a subscription in clear, forever, and
`muster notify list`, the tracker and the console show it, so no credential may ride in it.

Checked when a subscription is put (`entities.problems_of`), not in the contract: a subscription
already in the log still reads, and is still delivered to.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import parse_qsl, urlsplit

from contracts.secrets import is_reference, secret_name

WHERE_INSTEAD = ("give the URL as a reference, secret://<name>, to the notifier's secrets file (docs/governance.md, "
                 "\"Notifications\"); a receiver knows the sender by the signature (--secret)")


_LABEL = re.compile(r"(?!-)[\w-]{1,63}(?<!-)")
SIGNED = frozenset({"sig", "signature", "code", "x-amz-signature", "x-goog-signature"})
"""Query parameters that are the credential of well-known webhook URLs, whatever the secrets
rule says of their names (docs/secrets.md: `code` or `signature` is no secret in a config):
Azure Functions' `?code=<function key>`, Teams and Power Automate workflows' and Azure SAS'
`?sig=`, a pre-signed URL's `X-Amz-Signature`."""
_SCHEME = re.compile(r"^(https?|secret)://")


def _host(host: str) -> bool:
    """A host name (labels of letters, digits, `-`, `_`; any script) or an IP address."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return len(host) <= 253 and all(_LABEL.fullmatch(label) for label in host.rstrip(".").split("."))


def scheme_problem(url: str) -> str | None:
    """Why the URL is not one a webhook posts to, in words (the contract's pattern said `String
    should match pattern '^(https?|secret)://'`); never the URL itself, which may hold a credential."""
    if _SCHEME.match(url):
        return None
    scheme = urlsplit(url).scheme if "://" in url else ""
    said = f"its scheme {scheme[:20]!r} is not" if scheme else "it does not begin with"
    return f"{said} http:// or https:// (or secret://<name>, a URL in the notifier's secrets file)"


def url_problems(url: str) -> list[str]:
    """Every reason the URL may not be stored; [] when it may."""
    if url.startswith("secret://"):
        return [] if is_reference(url) else ["its URL reference must be secret://<name> (letters, digits, '_', '-', '.')"]
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as err:
        return [f"its URL cannot be read: {err}"]
    problems = []
    if not parts.hostname:
        problems.append("its URL names no host")
    elif not _host(parts.hostname):
        problems.append(f"its URL's host {parts.hostname!r} is neither a host name nor an address")
    if parts.username is not None or parts.password is not None:
        problems.append(f"its URL carries a user or password before the host, which the log would keep in clear: {WHERE_INSTEAD}")
    if parts.fragment or url.endswith("#"):
        # Never sent (a client keeps it), yet kept in the log and shown: `#access_token=...` was
        # stored in clear (session 33).
        problems.append("its URL has a fragment (`#...`), which a webhook's request never sends and the log would keep in "
                        "clear: leave it out")
    secret_params = sorted({k for k, _ in parse_qsl(parts.query, keep_blank_values=True) if secret_name(k) or k.lower() in SIGNED})
    if secret_params:
        named = ", ".join(repr(k) for k in secret_params)
        problems.append(f"its URL's query parameter{'s' if len(secret_params) > 1 else ''} {named} "
                        f"look{'' if len(secret_params) > 1 else 's'} like a credential, which the log would keep in clear: {WHERE_INSTEAD}")
    return problems
