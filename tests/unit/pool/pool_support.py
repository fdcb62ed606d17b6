"""Builders for pool tests: hosts with well-formed (not real) ed25519 host keys, requests."""

from __future__ import annotations

import base64
import hashlib
import struct
from datetime import datetime
from typing import Any

from contracts.pools import HostSpec, NodeNeed, PoolRequest
from services.pool.domain.pool import Pool, PoolCreated


def host_key(seed: str) -> str:
    blob = struct.pack(">I", 11) + b"ssh-ed25519" + struct.pack(">I", 32) + hashlib.sha256(seed.encode()).digest()
    return "ssh-ed25519 " + base64.b64encode(blob).decode()


def host(i: int | str, address: str | None = None, key: str | None = None, **props: Any) -> HostSpec:
    name = f"h{i:03d}" if isinstance(i, int) else i
    return HostSpec.model_validate({"id": name, "address": address or f"{name}.lab", "host_keys": [key or host_key(name)],
                                    "properties": props or {"cpu": 4, "memory": "8G"}})


def request(rid: str, n: int, tenant: str = "t1", requires: str = "", cluster: str | None = None,
            urgency: int = 50, deadline: datetime | None = None, **kw: Any) -> PoolRequest:
    return PoolRequest(
        request_id=rid, pool="p", tenant=tenant, cluster_id=cluster or f"c-{rid}",
        nodes=[NodeNeed(node_id=f"n{i}", hardwaretype="hw", requires=requires) for i in range(n)],
        urgency=urgency, deadline=deadline, by=f"user-{tenant}", **kw,
    )


def pool(n_hosts: int = 0, **props: Any) -> Pool:
    p = Pool(PoolCreated(pool="p", by="admin"))
    if n_hosts:
        p.add_hosts([host(i, **props) for i in range(n_hosts)], by="admin")
    return p


def types(p: Pool) -> list[str]:
    """The types of the events the aggregate recorded and has not handed out yet."""
    return [e.payload.type for e in p.pending_events]  # type: ignore[attr-defined]
