"""First start: the principals a deployment needs before anyone can ask for them (the local
super admin, each service's identity, a provisioner's queue grants) and the tenants it serves.

`muster up` writes a bootstrap file and the auth service makes what is missing on start; each
token goes to its own credentials file (mode 0600) and is reused while it stays valid, so a
restart does not multiply tokens.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from contracts import subjects
from contracts.identity import IdentityEvent, PermissionGranted, Scope, TenantCreated
from muster.bus.connect import CredentialsError, read_credentials_file, write_credentials_file
from muster.bus.eventstore import ConcurrencyError

from .backends.base import AuthError
from .backends.builtin import BuiltinBackend
from .domain.admin import bootstrap
from .domain.state import Grant

if TYPE_CHECKING:
    from .view import IdentityView

log = structlog.get_logger("muster.auth")


class IdentityWriter(Protocol):
    """What bootstrapping needs of the auth service (`service.AuthService`): the identities as
    the log has them, and a way to append to them."""

    @property
    def view(self) -> IdentityView | None: ...

    async def append(self, subject: str, event: IdentityEvent, expect: int | None) -> list[int]: ...


@dataclass(frozen=True)
class BootstrapPrincipal:
    principal: str
    role: str
    credentials: Path
    service: str | None = None
    queues: tuple[tuple[str, str], ...] = ()
    """(tenant, class) queues a provisioner serves"""
    token: str | None = None
    """register this token rather than make one (test harnesses); nothing is written then"""


@dataclass(frozen=True)
class Bootstrap:
    tenants: tuple[str, ...] = ()
    principals: tuple[BootstrapPrincipal, ...] = ()
    by: str = "muster-up"

    def to_json(self) -> dict[str, Any]:
        return {"tenants": list(self.tenants), "by": self.by, "principals": [
            {"principal": p.principal, "role": p.role, "service": p.service, "credentials": str(p.credentials),
             "queues": [list(q) for q in p.queues]} for p in self.principals]}

    @classmethod
    def from_file(cls, path: Path) -> Bootstrap:
        data = json.loads(path.read_text())
        return cls(tuple(data.get("tenants", ())), tuple(
            BootstrapPrincipal(p["principal"], p["role"], Path(p["credentials"]), p.get("service"),
                               tuple((q[0], q[1]) for q in p.get("queues", ())))
            for p in data.get("principals", ())), data.get("by", "muster-up"))


SYSTEM_TOKEN_ENV = "MUSTER_AUTH_SYSTEM_TOKEN"


def system_principal_from_env() -> list[BootstrapPrincipal]:
    """`$MUSTER_AUTH_SYSTEM_TOKEN`: a test harness's own token, registered as a `system` service
    (every right in the account) by every auth service it starts, so that one token works on
    every test server. Whoever sets an auth service's environment holds its keys anyway."""
    token = os.environ.get(SYSTEM_TOKEN_ENV)
    if not token:
        return []
    principal = token.split("_")[1] if token.count("_") == 3 else ""
    return [BootstrapPrincipal(principal, "service", Path(os.devnull), service="system", token=token)]


def _still_valid(service: IdentityWriter, p: BootstrapPrincipal) -> bool:
    assert service.view is not None
    if not p.credentials.is_file():
        return False
    try:
        token = read_credentials_file(p.credentials)
        return BuiltinBackend(service.view.state).authenticate(token, time.time()).principal.id == p.principal
    except (CredentialsError, AuthError):
        return False


async def ensure_bootstrap(service: IdentityWriter, spec: Bootstrap | None) -> None:
    spec = spec or Bootstrap()
    assert service.view is not None
    state, last = service.view.state, 0
    for tenant in spec.tenants:
        if tenant not in state.tenants:
            try:
                last = max(last, *await service.append(subjects.identity_events("tenant", tenant),
                                                       TenantCreated(tenant=tenant, by=spec.by), 0))
            except ConcurrencyError:
                pass  # another auth instance made it
    for p in [*spec.principals, *system_principal_from_env()]:
        if p.token is not None or not _still_valid(service, p):
            token, appends = bootstrap(state, p.principal, p.role, os.urandom, time.time(), spec.by, service=p.service,
                                       name="bootstrap", token=p.token)
            for subject, event, expect in appends:
                try:
                    last = max(last, *await service.append(subject, event, expect))
                except ConcurrencyError:
                    pass  # the principal exists already: only the new token matters
            if p.token is None:
                write_credentials_file(p.credentials, token, principal=p.principal)
                log.info("credentials written", principal=p.principal, file=str(p.credentials))
        for tenant, klass in p.queues:
            scope = Scope(tenant=tenant, kind="queue", id=klass)
            if Grant("execute", scope) not in state.grants_of(p.principal):
                event = PermissionGranted(principal=p.principal, permission="execute", scope=scope, by=spec.by)
                last = max(last, *await service.append(subjects.identity_events("principal", p.principal), event, None))
    if last:
        await service.view.wait_for(last)
