"""A subscription's last delivery as `muster notify list` and the console say it
(`services/governance/domain/deliveries.py`)."""

from __future__ import annotations

from datetime import UTC, datetime

from contracts.notifications import NotificationAttempted
from services.governance.domain.deliveries import latest, said

AT = datetime(2026, 12, 1, 2, 7, 39, tzinfo=UTC)


def test_a_failed_test_notification_is_said_to_be_the_test() -> None:
    """`muster notify test` of a receiver that times out left `undelivered ... (attempt 1)` as the
    subscription's last delivery, read as "given up", while its real notifications were still
    being retried (walk of session 26): it is said to be the test's."""
    test = latest(NotificationAttempted(id="hook-slow-test-03e765d0f8e4", attempt=1, ok=False, error="no answer within 5 s",
                                        final=True), AT)
    assert test is not None and test["test"] is True
    assert said(test) == "test undelivered at 2026-12-01 02:07:39 UTC: no answer within 5 s (attempt 1)"
    real = latest(NotificationAttempted(id="my-test-hook-280-job_succeeded", attempt=7, ok=False, status=500,
                                        error="HTTP 500 from http://h/x", final=True), AT)
    assert real is not None and real["test"] is False
    assert said(real) == "undelivered at 2026-12-01 02:07:39 UTC: HTTP 500 from http://h/x (attempt 7)"


def test_a_delivered_test_notification_is_said_to_be_the_test() -> None:
    """Session 33's audit: after `muster notify test bus`, `muster notify list` said `delivered at
    ...`, as if the subscription's notifications had gone; only a failed test said `test`."""
    test = latest(NotificationAttempted(id="bus-test-03e765d0f8e4", attempt=1, ok=True, status=204, final=True), AT)
    assert test is not None and said(test) == "test delivered at 2026-12-01 02:07:39 UTC (HTTP 204)"
    real = latest(NotificationAttempted(id="bus-12-job_failed", attempt=1, ok=True, final=True), AT)
    assert real is not None and said(real) == "delivered at 2026-12-01 02:07:39 UTC"
