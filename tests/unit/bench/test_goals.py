"""The benchmarks' regression guard (bench/goals.py, bench/run_all.py): a figure below its goal
is flagged, misses first, and --full / --quick pick each script's sizes. Nothing is timed here:
the figures are made up."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import goals, run_all


def _run(script: str, *stated: goals.Goal) -> run_all.Run:
    return run_all.Run(script, [], 0, 1.0, f"some table\n{goals.line(list(stated))}\n", "", True)


def test_a_scripts_goals_line_reads_back_and_each_verdict_says_meets_or_misses() -> None:
    fold = goals.Goal("full fold / raw", 0.55, ">=", 0.7, "x")
    resume = goals.Goal("resume", 2.4, "<=", 5.0, " s")
    assert goals.parse(f"noise\n{goals.line([fold, resume])}\nmore") == [fold, resume]
    assert (fold.met, resume.met) == (False, True)
    assert fold.verdict() == ">= 0.7x: **MISSES**" and resume.verdict() == "<= 5 s: meets"
    assert goals.parse("no goals here") == []


def test_the_summary_puts_the_misses_first_and_names_them() -> None:
    met = goals.Goal("resume", 2.4, "<=", 5.0, " s")
    missed = goals.Goal("dispatch p50 / raw | pull", 1.8, "<=", 1.5, "x")
    lines = run_all.goals_section([_run("a_bench.py", met), _run("b_bench.py", missed)])
    assert lines[2].startswith("**1 of 2 goals missed**") and "`b_bench.py` dispatch p50" in lines[2]
    rows = [line for line in lines if line.startswith("| `")]
    assert "MISSES" in rows[0] and "meets" in rows[1]
    assert "raw \\| pull" in rows[0]  # a table cell keeps its pipe escaped
    assert run_all.goals_section([_run("c_bench.py")]) == []


@pytest.mark.parametrize(("quick", "full", "expected"), [
    (False, False, []),
    (False, True, ["--full"]),
    (True, False, ["--steps", "1,2", "--quick"]),
])
def test_sizes_come_from_the_scripts_own_options(monkeypatch: pytest.MonkeyPatch, quick: bool, full: bool,
                                                 expected: list[str]) -> None:
    monkeypatch.setattr(run_all, "options_of", lambda script: "--steps STEPS  --full  --quick  --write-docs")
    monkeypatch.setitem(run_all.QUICK, "x_bench.py", ["--steps", "1,2", "--other", "3"])
    args, writes = run_all.plan_args(Path("x_bench.py"), quick, write_docs=True, full=full)
    assert args == expected + ([] if quick else ["--write-docs"])
    assert writes is not quick  # quick figures never replace a script's own section
