"""One way to show a time and a lease that never ends (muster/times.py): a user walk met
microseconds in `job list`, `...Z` in approvals, milliseconds in `history` and no zone in
`policy list`; and "never (no lease)" in the CLI, "forever" in the console and the timeline."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from contracts.events import ClusterLeaseChanged
from muster.readmodel.timeline import describe
from muster.times import NO_LEASE_END, lease_end, shown_time


@pytest.mark.parametrize("value", [datetime(2026, 11, 30, 12, 0, 5, 123456, tzinfo=UTC), "2026-11-30T12:00:05.123456+00:00",
                                   "2026-11-30T12:00:05.123Z", "2026-11-30T12:00:05", datetime(2026, 11, 30, 12, 0, 5),
                                   datetime(2026, 11, 30, 13, 0, 5, tzinfo=timezone(timedelta(hours=1)))])
def test_a_time_is_shown_to_the_second_in_utc_with_the_zone_as_the_console_does(value: datetime | str) -> None:
    assert shown_time(value) == "2026-11-30 12:00:05 UTC"


def test_what_is_no_time_is_shown_as_given() -> None:
    assert shown_time(None) == "-" and shown_time("soon") == "soon"


def test_a_lease_that_never_ends_reads_the_same_in_the_cli_and_the_timeline() -> None:
    assert lease_end(None) == NO_LEASE_END == "never (no lease)"
    assert lease_end("2026-11-30T12:00:05Z") == "2026-11-30 12:00:05 UTC"
    assert describe(ClusterLeaseChanged(cluster_id="c", expires_at=None)) == f"lease: expires {NO_LEASE_END}"
