"""The requests a pool holds: waiting in policy order, or granted and not yet closed."""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field

from contracts.pools import Assignment, PoolRequest

from .matching import parse_requirement

Key = tuple[float, int, str]


@dataclass(slots=True)
class OpenRequest:
    request: PoolRequest
    score: float
    priority: int
    arrival: int
    state: str = "waiting"
    assignments: list[Assignment] = field(default_factory=list)
    needs: dict[str, list[str]] = field(init=False)
    """Canonical requirement -> the nodes that need it (sorted)."""

    def __post_init__(self) -> None:
        needs: dict[str, list[str]] = {}
        for n in self.request.nodes:
            needs.setdefault(parse_requirement(n.requires).text, []).append(n.node_id)
        self.needs = {r: sorted(ids) for r, ids in needs.items()}

    @property
    def key(self) -> Key:
        return (-self.score, self.arrival, self.request.request_id)

    @property
    def size(self) -> int:
        return len(self.request.nodes)

    def counts(self) -> dict[str, int]:
        return {r: len(ids) for r, ids in self.needs.items()}


class RequestBook:
    def __init__(self) -> None:
        self.open: dict[str, OpenRequest] = {}
        self.waiting: list[Key] = []
        self.finished: dict[str, str] = {}
        """request id -> how it ended (refused, cancelled, expired, closed): a redelivered
        request is recognised and ignored."""
        self.arrivals = 0
        self.waiting_nodes: Counter[str] = Counter()
        self.waiting_clusters: dict[str, Counter[str]] = {}

    def known(self, request_id: str) -> bool:
        return request_id in self.open or request_id in self.finished

    def position(self, request_id: str) -> int | None:
        """1 = next to be served; None unless waiting."""
        r = self.open.get(request_id)
        if r is None or r.state != "waiting":
            return None
        return bisect.bisect_left(self.waiting, r.key) + 1

    def in_order(self) -> list[OpenRequest]:
        return [self.open[k[2]] for k in self.waiting]

    # -- changing (from event handlers only) ---------------------------------------------

    def enqueue(self, request: PoolRequest, score: float, priority: int) -> OpenRequest:
        self.arrivals += 1
        r = OpenRequest(request, score, priority, self.arrivals)
        self.open[request.request_id] = r
        bisect.insort(self.waiting, r.key)
        self._count(r, +1)
        return r

    def granted(self, request_id: str, assignments: list[Assignment]) -> OpenRequest:
        r = self.open[request_id]
        self._unqueue(r)
        r.state = "granted"
        r.assignments = list(assignments)
        return r

    def finish(self, request_id: str, how: str) -> OpenRequest | None:
        r = self.open.pop(request_id, None)
        if r is not None and r.state == "waiting":
            self._unqueue(r)
        self.finished[request_id] = how
        return r

    def _unqueue(self, r: OpenRequest) -> None:
        i = bisect.bisect_left(self.waiting, r.key)
        if i < len(self.waiting) and self.waiting[i] == r.key:
            del self.waiting[i]
            self._count(r, -1)

    def _count(self, r: OpenRequest, sign: int) -> None:
        tenant, cluster = r.request.tenant, r.request.cluster_id
        self.waiting_nodes[tenant] += sign * r.size
        if tenant not in self.waiting_clusters:
            self.waiting_clusters[tenant] = Counter()
        clusters = self.waiting_clusters[tenant]
        clusters[cluster] += sign
        if not clusters[cluster]:
            del clusters[cluster]
