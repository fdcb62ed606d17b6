from __future__ import annotations

import os

import pytest

from contracts.identity import PermissionGranted, PrincipalCreated, Scope, TenantCreated
from services.auth.domain.state import IdentityState


def rand(n: int) -> bytes:
    return os.urandom(n)


@pytest.fixture
def state() -> IdentityState:
    """Tenants a and b; root (super admin), ada (admin of a), bob (admin of b), alice, carol
    (users of a), dave (user of b), p1 (a provisioner), planner (service)."""
    s = IdentityState()
    events = [TenantCreated(tenant="a", by="root"), TenantCreated(tenant="b", by="root"),
              PrincipalCreated(principal="root", role="super_admin", by="muster-up"),
              PrincipalCreated(principal="ada", role="tenant_admin", tenant="a", by="root"),
              PrincipalCreated(principal="bob", role="tenant_admin", tenant="b", by="root"),
              PrincipalCreated(principal="alice", role="user", tenant="a", by="ada"),
              PrincipalCreated(principal="carol", role="user", tenant="a", by="ada"),
              PrincipalCreated(principal="dave", role="user", tenant="b", by="bob"),
              PrincipalCreated(principal="p1", role="service", service="provisioner", by="root"),
              PrincipalCreated(principal="planner", role="service", service="planner", by="root"),
              PermissionGranted(principal="p1", permission="execute", scope=Scope(tenant="a", kind="queue", id="default"), by="root")]
    for seq, e in enumerate(events, start=1):
        s.apply(e, seq)
    return s
