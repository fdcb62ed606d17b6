from __future__ import annotations

import pytest
from pool_support import request

from contracts.pools import PoolTerms, TenantTerms
from services.pool.domain.policy import DEFAULT, POLICIES, policy_named, priority_of


def test_default_policy_is_hedebys_urgency_times_priority() -> None:
    # Hedeby overview, example 1.7: A (urgency 50, priority 2) scores 100, B (40 x 3) 120.
    assert DEFAULT.score(request("a", 1, urgency=50), 2) == 100
    assert DEFAULT.score(request("b", 1, urgency=40), 3) == 120


def test_tenant_priority_comes_from_the_pool_terms_or_its_default() -> None:
    terms = PoolTerms(default_priority=2, tenants={"gold": TenantTerms(priority=5)})
    assert priority_of(terms, "gold") == 5
    assert priority_of(terms, "anyone") == 2


def test_policies_are_pluggable_by_name() -> None:
    assert {"urgency-x-priority", "fifo", "priority"} <= set(POLICIES)
    with pytest.raises(ValueError, match="unknown policy 'lottery'"):
        policy_named("lottery")
