"""The notifier's named secrets, per tenant (pure; docs/governance.md, "Notifications").

One notifier serves every tenant, so its secrets file says whose each secret is: those under
`@tenants` → `<tenant>` are that tenant's alone; those under `@secrets` are every tenant's (a
deployment with one tenant needs nothing else). A tenant's `secret://<name>` is its own secret of
that name, else the shared one: never another tenant's, so no tenant signs with another's key or
posts to another's Slack, and no answer tells a tenant whether another has a secret of a name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from contracts.secrets import NAMED, REFERENCE
from muster.secretsfile import TENANTS, SecretsFileError, parse

__all__ = ["TENANTS", "NotifierSecrets", "SecretsFileError"]


@dataclass(frozen=True)
class NotifierSecrets:
    shared: Mapping[str, Any] = field(default_factory=dict)
    tenants: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    given: bool = True
    """False: the notifier was started without a file (every reference is missing, and why)."""

    @classmethod
    def of(cls, data: Mapping[str, Any], where: str = "the secrets file") -> NotifierSecrets:
        """The named secrets of a secrets file (its form, the provisioners' too: muster/secretsfile.py):
        `@secrets`, and each tenant's under `@tenants` → `<tenant>` (its `@secrets`, or a string
        directly under it); a provider's entries are the provisioners'."""
        read = parse(data, where)
        return cls(dict(read.shared.named), {t: dict(own.named) for t, own in read.tenants.items()})

    def value(self, tenant: str, reference: str) -> tuple[str, str]:
        """(the value of a tenant's `secret://<name>`, '') or ('', why there is none). The reason
        names the reference only, the same whether or not another tenant has one so named."""
        found = REFERENCE.fullmatch(reference)
        name = found.group(1) if found else ""
        own = self.tenants.get(tenant, {})
        value = own.get(name) if name in own else self.shared.get(name)
        if not isinstance(value, str) or not value:
            if not self.given:  # said as what to do: "not in the file" sent people looking for one
                return "", (f"secret {name or '?'!r}: the notifier was started without a secrets file (its operator gives "
                            "it one: `muster notifier --secrets FILE`, or $MUSTER_NOTIFIER_SECRETS, which `muster up` "
                            'passes on; docs/governance.md, "Whose secrets")')
            return "", (f"secret {name or '?'!r} is not in the notifier's secrets file (under '{NAMED}', or "
                        f"'{TENANTS}' → '{tenant}')")
        return value, ""
