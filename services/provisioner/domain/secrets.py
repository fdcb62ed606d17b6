"""Whose each entry of a provisioner's secrets file is (pure; docs/secrets.md, "Whose secrets").

One provisioner may serve several tenants (`muster up --tenant acme,beta`), and a provider's name
and a `secret://NAME` come from each tenant's own catalog and requests: a name says nothing of
whose it is, so beta could name acme's `aws-prod` or `secret://acme-db`. The file says it instead:
under `@tenants` → `<tenant>`, entries in the top level's own form (a provider's fields, named
secrets under `@secrets`) that only that tenant's tasks see, and which take precedence. The top
level is every served tenant's: for one tenant, or what the operator chose to share. A tenant's
provider is its own entry of that name, else the shared one, never another tenant's (whole: two
accounts' halves are never mixed); a named secret likewise. No answer says whether another tenant
has a name: a task that names what its tenant lacks fails in the same words either way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from contracts.secrets import NAMED
from muster.secretsfile import TENANTS, SecretsFileError, parse

__all__ = ["TENANTS", "ProvisionerSecrets", "SecretsFileError"]

Entries = Mapping[str, Mapping[str, Any]]
"""A provider's name -> its fields, and `@secrets` -> name -> secret."""


@dataclass(frozen=True)
class ProvisionerSecrets:
    shared: Entries = field(default_factory=dict)
    tenants: Mapping[str, Entries] = field(default_factory=dict)

    @classmethod
    def of(cls, data: Mapping[str, Any], where: str = "secrets") -> ProvisionerSecrets:
        """From a secrets file's content (its form: muster/secretsfile.py); SecretsFileError names
        the entry that is not of it."""
        read = parse(data, where)

        def entries(providers: Entries, named: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
            return {**providers, **({NAMED: dict(named)} if named else {})}

        return cls(entries(read.shared.providers, read.shared.named),
                   {t: entries(own.providers, own.named) for t, own in read.tenants.items()})

    def provider(self, tenant: str, name: str) -> Mapping[str, Any]:
        """The fields of provider `name` for `tenant`'s tasks: its own entry, else the shared one."""
        own = self.tenants.get(tenant, {})
        return own[name] if name in own else self.shared.get(name, {})

    def named(self, tenant: str) -> dict[str, Any]:
        """The named secrets `tenant`'s references may name: its own, over the shared ones."""
        return {**self.shared.get(NAMED, {}), **self.tenants.get(tenant, {}).get(NAMED, {})}

    def shared_names(self) -> list[str]:
        """The entries every served tenant's tasks see, by name (said in the log at start)."""
        return sorted([n for n in self.shared if n != NAMED] + [f"{NAMED}.{n}" for n in self.shared.get(NAMED, {})])

    def lacks(self, tenant: str, names: Iterable[str]) -> str:
        """Why a task of `tenant` that refers to `names` cannot run ('' if it can): the first name
        its tenant lacks, in words that do not depend on any other tenant's secrets."""
        missing = sorted(set(names) - set(self.named(tenant)))
        if not missing:
            return ""
        return (f"secret {missing[0]!r} is not in this provisioner's secrets file (under {NAMED!r}, or {TENANTS!r} → "
                f"{tenant!r} → {NAMED!r}; docs/secrets.md)")
