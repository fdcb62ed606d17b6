"""A lease asked of a create, or added by an extension, is at most a century: `muster cluster
create ... --lease 99999999999d` was accepted by the contract and made the planner's lease
arithmetic overflow (`timedelta`), answered as an internal error."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from contracts.commands import MAX_LEASE_S, CreateCluster, ExtendLease
from contracts.errors import describe_validation_error
from services.planner.domain.leases import Terms, initial


@pytest.mark.parametrize("seconds", [99999999999 * 86400.0, 1e300])
def test_a_lease_past_a_century_is_refused_naming_the_field(seconds: float) -> None:
    with pytest.raises(ValidationError) as create:
        CreateCluster(name="web", template="t", nodes=2, lease_s=seconds)
    assert describe_validation_error(create.value).startswith("lease_s: ") and f"over the limit: at most {MAX_LEASE_S}" in describe_validation_error(create.value)
    with pytest.raises(ValidationError) as extend:
        ExtendLease(cluster_id="c1", by_s=seconds)
    assert describe_validation_error(extend.value).startswith("by_s: ")


def test_the_longest_lease_is_one_the_planner_can_reckon() -> None:
    now = datetime(2026, 12, 2, tzinfo=UTC)
    lease = initial(Terms(), MAX_LEASE_S, now)
    assert lease.expires_at is not None and lease.expires_at.year == 2126
