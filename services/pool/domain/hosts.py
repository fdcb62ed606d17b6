"""The hosts of one pool and the indexes a decision needs (pure; mutated only by the Pool
aggregate's event handlers).

A host's life (Hedeby's resource states, overview §1.1.1.3):

    unassigned --grant--> assigning --confirmed--> assigned --releasing--> unassigning
        ^                     |                       |                        |
        +------ released -----+-----------------------+------------------------+
    any held state --failed--> error --reset (administrator, once released)--> unassigned

Apart from its state a host can be *ambiguous*: registered twice with other facts, or sharing
its address with another host. An ambiguous host is lent to nobody until resolved.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field

from contracts.pools import Holder, HostSpec

from .matching import Signature, signature

HELD = ("assigning", "assigned", "unassigning")


@dataclass(slots=True)
class Host:
    spec: HostSpec
    state: str = "unassigned"
    holder: Holder | None = None
    claims: list[HostSpec] = field(default_factory=list)
    """Other registrations of this id that disagree with `spec` (ambiguity)."""
    others: set[str] = field(default_factory=set)
    """Other hosts registered with this host's address (ambiguity)."""
    error: str = ""
    sig: Signature = field(init=False)

    def __post_init__(self) -> None:
        self.sig = signature(self.spec.properties)

    @property
    def ambiguous(self) -> bool:
        return bool(self.claims or self.others)

    @property
    def free(self) -> bool:
        return self.state == "unassigned" and self.holder is None and not self.ambiguous

    def view(self) -> dict[str, object]:
        h = self.holder
        return {
            "id": self.spec.id, "address": self.spec.address, "port": self.spec.port, "user": self.spec.user,
            "state": self.state, "kind": self.spec.kind, "ambiguous": self.ambiguous,
            "properties": self.spec.properties.model_dump(),
            "holder": h.model_dump() if h else None, "error": self.error,
            "claims": [c.model_dump() for c in self.claims], "shares_address_with": sorted(self.others),
            "host_keys": list(self.spec.host_keys),
        }


class HostBook:
    """Every host, with the free ones indexed by signature (kept sorted by id, so a grant picks
    the same hosts on every replay and in every test) and holders by (cluster, node)."""

    def __init__(self) -> None:
        self.hosts: dict[str, Host] = {}
        self.free: dict[Signature, list[str]] = {}
        self.addresses: dict[tuple[str, int], set[str]] = {}
        self.holders: dict[tuple[str, str], str] = {}
        self.held_by_tenant: dict[str, Counter[str]] = {}
        """tenant -> cluster -> hosts held."""
        self.all_sigs: Counter[Signature] = Counter()
        """Every host's signature, whatever its state (can a request ever be served?)."""

    # -- reading --------------------------------------------------------------------------

    def __contains__(self, host_id: str) -> bool:
        return host_id in self.hosts

    def get(self, host_id: str) -> Host | None:
        return self.hosts.get(host_id)

    def free_counts(self) -> dict[Signature, int]:
        return {s: len(ids) for s, ids in self.free.items() if ids}

    def at(self, address: str, port: int) -> set[str]:
        return self.addresses.get((address.lower(), port), set())

    def held(self, cluster_id: str, node_id: str) -> Host | None:
        host_id = self.holders.get((cluster_id, node_id))
        return self.hosts[host_id] if host_id is not None else None

    def states(self) -> Counter[str]:
        return Counter("ambiguous" if h.ambiguous else h.state for h in self.hosts.values())

    # -- changing (from event handlers only) ---------------------------------------------

    def add(self, spec: HostSpec) -> Host:
        host = Host(spec)
        self.hosts[spec.id] = host
        self.addresses.setdefault((spec.address.lower(), spec.port), set()).add(spec.id)
        self.all_sigs[host.sig] += 1
        self.refresh(host)
        return host

    def forget(self, host_id: str) -> list[str]:
        """Remove a host; returns hosts that shared its address and are now unfrozen."""
        host = self.hosts.pop(host_id)
        self.hold(host, None)
        self._unfree(host)  # after hold(): it puts a free-looking host back in the index
        key = (host.spec.address.lower(), host.spec.port)
        self.addresses[key].discard(host_id)
        if not self.addresses[key]:
            del self.addresses[key]
        self.all_sigs[host.sig] -= 1
        if not self.all_sigs[host.sig]:
            del self.all_sigs[host.sig]
        unfrozen = []
        for other_id in host.others:
            other = self.hosts.get(other_id)
            if other is not None:
                other.others.discard(host_id)
                if not other.ambiguous:
                    unfrozen.append(other_id)
                self.refresh(other)
        return sorted(unfrozen)

    def respec(self, host: Host, spec: HostSpec) -> None:
        """An administrator chose which registration of an ambiguous host is right."""
        self._unfree(host)
        key = (host.spec.address.lower(), host.spec.port)
        self.addresses[key].discard(host.spec.id)
        if not self.addresses[key]:
            del self.addresses[key]
        self.all_sigs[host.sig] -= 1
        if not self.all_sigs[host.sig]:
            del self.all_sigs[host.sig]
        host.spec = spec
        host.sig = signature(spec.properties)
        host.claims = []
        self.addresses.setdefault((spec.address.lower(), spec.port), set()).add(spec.id)
        self.all_sigs[host.sig] += 1
        self.refresh(host)

    def hold(self, host: Host, holder: Holder | None) -> None:
        old = host.holder
        if old is not None:
            self.holders.pop((old.cluster_id, old.node_id), None)
            clusters = self.held_by_tenant[old.tenant]
            clusters[old.cluster_id] -= 1
            if not clusters[old.cluster_id]:
                del clusters[old.cluster_id]
        host.holder = holder
        if holder is not None:
            self.holders[(holder.cluster_id, holder.node_id)] = host.spec.id
            if holder.tenant not in self.held_by_tenant:  # (setdefault would build a Counter every time)
                self.held_by_tenant[holder.tenant] = Counter()
            self.held_by_tenant[holder.tenant][holder.cluster_id] += 1
        self.refresh(host)

    def refresh(self, host: Host) -> None:
        """Put the host in the free index or take it out, as its state says."""
        if host.free:
            ids = self.free.setdefault(host.sig, [])
            i = bisect.bisect_left(ids, host.spec.id)
            if i == len(ids) or ids[i] != host.spec.id:
                ids.insert(i, host.spec.id)
        else:
            self._unfree(host)

    def _unfree(self, host: Host) -> None:
        ids = self.free.get(host.sig)
        if not ids:
            return
        i = bisect.bisect_left(ids, host.spec.id)
        if i < len(ids) and ids[i] == host.spec.id:
            del ids[i]
            if not ids:
                del self.free[host.sig]
