"""The scale bench's repeats (`--repeat`): one create's CPU per task moves by a fifth between runs
of the same code on the shared machine, so the flat-CPU goal is judged on each size's median run,
and the tables say which runs it came from. Nothing is timed here: the figures are made up."""

from __future__ import annotations

from typing import Any

from bench import scale_bench


def _run(nodes: int, cpu: float, tasks_per_s: float = 500.0) -> dict[str, Any]:
    tasks = 11 * nodes + 6
    return {"nodes": nodes, "final": "JobSucceeded", "wall_s": tasks / tasks_per_s, "settled_s": tasks / tasks_per_s,
            "tasks": tasks, "tasks_per_s": tasks_per_s, "raw_publish_per_s": 2000.0, "cpu_ms_per_task": cpu,
            "cpu_s": {"planner": cpu * tasks / 2000, "nats-server": cpu * tasks / 2000}, "messages_per_task": 11.5,
            "bytes_per_task": 6000.0, "by_kind": {}, "bytes_by_kind": {}, "writes": {}, "connections": {},
            "peak_mb": {"planner": 70.0}, "largest_bytes": 1000, "largest_subject": "x"}


def test_the_median_run_stands_for_its_size_and_every_run_is_listed() -> None:
    runs = [_run(100, 1.74), _run(100, 1.31), _run(100, 1.52)]
    median = scale_bench.median_run(runs)
    assert median["cpu_ms_per_task"] == 1.52
    assert [r["cpu_ms_per_task"] for r in median["repeats"]] == [1.74, 1.31, 1.52]  # in the order they ran
    assert scale_bench.median_run(runs[:2])["cpu_ms_per_task"] == 1.31  # even: the lower middle, not a mean


def test_the_flat_cpu_goal_is_judged_on_the_medians_and_the_table_shows_the_spread() -> None:
    curve = [scale_bench.median_run([_run(100, 1.74), _run(100, 1.31), _run(100, 1.52)]),
             scale_bench.median_run([_run(1000, 1.19), _run(1000, 1.25), _run(1000, 1.10)])]
    flat = [g for g in scale_bench.goals_of(curve, None) if g.figure.startswith("CPU per task")]
    assert [g.value for g in flat] == [round(1.52 / 1.19, 2)]
    text = "\n".join(scale_bench.curve_lines(curve))
    assert "| 100 | 1.52 | 1.31-1.74 | 1.74 (500, 2000), 1.31 (500, 2000), 1.52 (500, 2000) |" in text
    assert "| 1,000 | 1.19 | 1.10-1.25 |" in text


def test_a_single_run_shows_no_repeats_table() -> None:
    assert "median CPU ms/task" not in "\n".join(scale_bench.curve_lines([_run(100, 1.5)]))
