"""Who goes first when the pool is short (Hedeby's policy engine).

A policy turns a request's urgency and its tenant's priority into a score; waiting requests
are served by score, highest first, then in arrival order. The score is recorded with the
request (`RequestAccepted.score`), so the order is a fact of the log: a reader needs no policy
code to know who is next, and changing the policy later reorders nothing already waiting.

The default multiplies urgency by priority, as Hedeby's simple policy engine does (overview
§1.1.3.1: service A, urgency 50 x priority 2 = 100, loses to service B, 40 x 3 = 120). Register
more with `register`; a pool names its policy in its terms (`muster pool configure --policy`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from contracts.pools import PoolRequest, PoolTerms

Score = Callable[[PoolRequest, int], float]
"""(request, its tenant's priority) -> score; higher is served first."""


@dataclass(frozen=True)
class Policy:
    name: str
    score: Score
    description: str


POLICIES: dict[str, Policy] = {}


def register(policy: Policy) -> Policy:
    POLICIES[policy.name] = policy
    return policy


DEFAULT = register(Policy(
    "urgency-x-priority", lambda request, priority: float(request.urgency * priority),
    "urgency x tenant priority; ties in arrival order",
))
register(Policy("fifo", lambda request, priority: 0.0, "arrival order only"))
register(Policy("priority", lambda request, priority: float(priority), "tenant priority, then arrival order"))


def priority_of(terms: PoolTerms, tenant: str) -> int:
    t = terms.tenants.get(tenant)
    return t.priority if t is not None else terms.default_priority


def policy_named(name: str) -> Policy:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}") from None
