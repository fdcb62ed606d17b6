"""What a tenant's people see of a provisioner (pure): its tenant alone, the others counted and
not named, no host or process id (the operator's), in `GET /v1/provisioners` and in its
registrations on the tenant's log (`GET /v1/events`, `muster events`).

A provisioner that serves several tenants registers on each tenant's log naming every tenant it
serves: read through the filter `provisioner.>`, beta's log named acme."""

from __future__ import annotations

from typing import Any

REGISTERED = "ProvisionerRegistered"


def info_for(info: dict[str, Any], tenant: str) -> tuple[dict[str, Any], int]:
    """(a provisioner's `ProvisionerInfo` as the tenant's people see it, the other tenants it serves)."""
    others = len([t for t in info.get("tenants", ()) if t != tenant])
    shown = {k: v for k, v in info.items() if k not in ("host", "pid")}
    shown["tenants"] = [tenant]
    return shown, others


def event_for(data: dict[str, Any], tenant: str) -> dict[str, Any]:
    """An event as the tracker serves it (`event_json`), as the tenant's people see it."""
    if data.get("type") != REGISTERED:
        return data
    event = dict(data["event"])
    event["provisioner"], event["others"] = info_for(event["provisioner"], tenant)
    return {**data, "event": event}
