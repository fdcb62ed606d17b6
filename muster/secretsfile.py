"""The secrets file (docs/secrets.md, "The file"): one format, read by the provisioners and by the
notifier, so one file can serve both. Pure but for `load_secrets`, which reads it.

- At the top level, every tenant's entries: a provider's name -> its fields (an object), and
  `@secrets` -> name -> a named secret (`secret://NAME`).
- Under `@tenants` -> `<tenant>`, that tenant's own entries, in the same form. A string directly
  under a tenant is a named secret of that tenant too: the notifier's first form, still read by
  both (decision 40); a name given both ways is refused, as two values for one name would leave
  which one a task or a webhook gets to the reader.

Each service takes what it uses (the provisioner both, the notifier the named secrets), and a
file that is not of this form is refused at start, naming the entry, by both alike.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.secrets import NAMED
from contracts.subjects import SubjectError, token

TENANTS = "@tenants"


class SecretsFileError(ValueError):
    pass


@dataclass(frozen=True)
class Section:
    """One owner's entries: the top level's (every served tenant's) or one tenant's own."""

    providers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    named: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SecretsFile:
    shared: Section = field(default_factory=Section)
    tenants: Mapping[str, Section] = field(default_factory=dict)


def _named(value: Any, here: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise SecretsFileError(f"{here}{NAMED!r} must be an object of name -> secret, got {type(value).__name__}")
    return {str(k): v for k, v in value.items()}


def _section(data: Mapping[str, Any], here: str, tenant: bool) -> Section:
    providers: dict[str, dict[str, Any]] = {}
    named = _named(data.get(NAMED, {}), here)
    flat: dict[str, str] = {}
    for name, value in data.items():
        if name == NAMED:
            continue
        if name == TENANTS:
            raise SecretsFileError(f"{here}{TENANTS!r} is only at the top of the file")
        if isinstance(value, Mapping):
            providers[str(name)] = dict(value)
        elif tenant and isinstance(value, str):
            flat[str(name)] = value
        else:
            what = "an object of a provider's fields" + (", or a string: a named secret" if tenant else "")
            hint = f" (a named secret goes under {NAMED!r})" if isinstance(value, str) else ""
            raise SecretsFileError(f"{here}entry {name!r} must be {what}, got {type(value).__name__}{hint}")
    twice = sorted(n for n in flat if n in named)
    if twice:
        raise SecretsFileError(f"{here}secret {twice[0]!r} is given twice, directly under the tenant and under {NAMED!r}: "
                               f"keep one (under {NAMED!r})")
    return Section(providers, {**flat, **named})


def parse(data: Any, where: str = "secrets") -> SecretsFile:
    """A secrets file's content, checked; SecretsFileError names the entry that is not of its form."""
    if not isinstance(data, Mapping):
        raise SecretsFileError(f"{where}: must be a JSON object (a provider's name -> its fields, {NAMED!r}, {TENANTS!r}), "
                               f"got {type(data).__name__}")
    tenants = data.get(TENANTS, {})
    shared = _section({k: v for k, v in data.items() if k != TENANTS}, f"{where}: ", tenant=False)
    if not isinstance(tenants, Mapping):
        raise SecretsFileError(f"{where}: {TENANTS!r} must be an object of tenant -> its own entries "
                               f"(a provider's name -> fields, {NAMED!r} -> named secrets)")
    own: dict[str, Section] = {}
    for tenant, entries in tenants.items():
        here = f"{where}: {TENANTS!r} → {tenant!r}"
        try:
            token(tenant, "tenant")
        except SubjectError as err:
            raise SecretsFileError(f"{here}: {err}") from None
        if not isinstance(entries, Mapping):
            raise SecretsFileError(f"{here} must be an object of the tenant's own entries, got {type(entries).__name__}")
        own[tenant] = _section(entries, f"{here}: ", tenant=True)
    return SecretsFile(shared, own)


def load_secrets(path: str | None) -> dict[str, Any]:
    """The file's content (checked by `parse`, which names the file with `where`)."""
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise SecretsFileError(f"cannot read secrets file {path}: {err}") from None
    if not isinstance(data, dict):
        raise SecretsFileError(f"secrets file {path}: must be a JSON object (a provider's name -> its fields, {NAMED!r}, "
                               f"{TENANTS!r}), got {type(data).__name__}")
    return data
