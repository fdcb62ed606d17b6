"""Queue metrics for scaling workers, from event times only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.planner.metrics import QueueMetrics

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_wait_duration_backlog_and_recommendation() -> None:
    m = QueueMetrics(drain_target_s=10)
    for i in range(10):  # one task a second, each claimed 0.5 s later, running 4 s
        m.queued("acme", "default", "j", f"t{i}", 1, at(i))
        m.claimed("j", f"t{i}", 1, at(i + 0.5))
        m.finished("j", f"t{i}", 1, at(i + 4.5))
    for i in range(10, 15):  # a backlog of 5 nobody claimed yet
        m.queued("acme", "default", "j", f"t{i}", 1, at(i))
    [q] = m.snapshot(at(14))
    assert (q["tenant"], q["class"], q["queue_length"], q["in_progress"], q["finished"]) == ("acme", "default", 5, 0, 10)
    assert q["time_in_queue_s"]["mean"] == 0.5 and q["task_duration_s"]["p50"] == 4.0
    assert q["arrival_rate_per_s"] == 1.0
    # 1 task/s x 4 s = 4 workers to keep up, + 5 x 4 s / 10 s = 2 to drain the backlog
    assert q["recommended_workers"] == 6


def test_repeated_and_unknown_events_change_nothing() -> None:
    m = QueueMetrics()
    m.queued("acme", "default", "j", "t", 1, at(0))
    m.queued("acme", "default", "j", "t", 1, at(5))  # redelivered TaskQueued
    m.claimed("j", "t", 1, at(1))
    m.claimed("j", "t", 1, at(9))
    m.finished("j", "t", 1, at(3))
    m.finished("j", "t", 1, at(30))
    m.finished("j", "other", 1, at(30))
    [q] = m.snapshot(at(30))
    assert q["finished"] == 1 and q["time_in_queue_s"]["mean"] == 1.0 and q["task_duration_s"]["mean"] == 2.0


def test_the_rate_counts_a_window_and_falls_to_zero_when_work_stops() -> None:
    m = QueueMetrics(drain_target_s=10, window_s=60)
    for i in range(120):  # two tasks a second for a minute, each running 3 s
        m.queued("acme", "default", "j", f"t{i}", 1, at(i / 2))
        m.claimed("j", f"t{i}", 1, at(i / 2))
        m.finished("j", f"t{i}", 1, at(i / 2 + 3))
    [busy] = m.snapshot(at(60))
    assert abs(busy["arrival_rate_per_s"] - 2.0) < 0.05 and busy["recommended_workers"] == 6  # 2/s x 3 s
    [half] = m.snapshot(at(90))
    assert abs(half["arrival_rate_per_s"] - 1.0) < 0.05 and half["recommended_workers"] == 3
    [idle] = m.snapshot(at(121))
    assert idle["arrival_rate_per_s"] == 0 and idle["recommended_workers"] == 0 and idle["finished"] == 120


def test_the_first_seconds_of_work_are_not_diluted_by_the_window() -> None:
    m = QueueMetrics(window_s=60)
    for i in range(10):
        m.queued("acme", "gpu", "j", f"t{i}", 1, at(i))
    [q] = m.snapshot(at(9))
    assert q["arrival_rate_per_s"] == 1.0 and q["class"] == "gpu"
