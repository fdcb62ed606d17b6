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

TENANTS = "@tenants"


class SecretsFileError(ValueError):
    pass


@dataclass(frozen=True)
class NotifierSecrets:
    shared: Mapping[str, Any] = field(default_factory=dict)
    tenants: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, data: Mapping[str, Any], where: str = "the secrets file") -> NotifierSecrets:
        """From a secrets file's content (`@secrets`, `@tenants`; the rest is the provisioners')."""
        shared = data.get(NAMED, {})
        tenants = data.get(TENANTS, {})
        if not isinstance(shared, Mapping):
            raise SecretsFileError(f"{where} must hold an {NAMED!r} object of name -> secret")
        if not isinstance(tenants, Mapping) or not all(isinstance(v, Mapping) for v in tenants.values()):
            raise SecretsFileError(f"{where} must hold an {TENANTS!r} object of tenant -> (name -> secret)")
        if not all(isinstance(v.get(NAMED, {}), Mapping) for v in tenants.values()):
            raise SecretsFileError(f"{where}: {TENANTS!r} → <tenant> → {NAMED!r} must be an object of name -> secret")
        # A tenant's named secrets: under its own `@secrets`, as the provisioners read the same
        # file (docs/secrets.md), or directly under the tenant (this file's first form).
        return cls(dict(shared), {t: {**{k: s for k, s in v.items() if k != NAMED}, **v.get(NAMED, {})}
                                  for t, v in tenants.items()})

    def value(self, tenant: str, reference: str) -> tuple[str, str]:
        """(the value of a tenant's `secret://<name>`, '') or ('', why there is none). The reason
        names the reference only, the same whether or not another tenant has one so named."""
        found = REFERENCE.fullmatch(reference)
        name = found.group(1) if found else ""
        own = self.tenants.get(tenant, {})
        value = own.get(name) if name in own else self.shared.get(name)
        if not isinstance(value, str) or not value:
            return "", (f"secret {name or '?'!r} is not in the notifier's secrets file (under '{NAMED}', or "
                        f"'{TENANTS}' → '{tenant}')")
        return value, ""
