"""A node count past muster's limit is said in that limit's one sentence, naming the option,
however many digits it has: `muster cluster create -n <41 digits>` (and `solve --nodes`,
`expand --add`) read "out of range: give at least 1", the one bound it did not pass; and a
number of 19 digits or more given to any other whole-number option is not told its lower bound
either."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from muster.cli import main

HUGE = "1" + "0" * 40


@pytest.mark.parametrize(("args", "option"), [
    (["cluster", "create", "web", "-t", "hadoop-small", "-n", HUGE], "'--nodes' / '-n'"),
    (["cluster", "create", "web", "-t", "hadoop-small", "-n", "20000"], "'--nodes' / '-n'"),
    (["cluster", "expand", "web", "--add", HUGE], "'--add'"),
    (["cluster", "shrink", "web", "-n", HUGE], "'--nodes' / '-n'"),
    (["solve", "--catalog", ".", "--template", "t", "--nodes", HUGE], "'--nodes'"),
])
def test_a_count_past_the_limit_names_the_option_and_the_limit(args: list[str], option: str) -> None:
    result = CliRunner().invoke(main, args, prog_name="muster", env={"NATS_URL": "nats://127.0.0.1:1"})
    assert result.exit_code == 2, result.output
    assert f"Error: Invalid value for {option}: a cluster has at most 10,000 nodes (muster's limit" in result.output, result.output
    assert "requested" in result.output and "give at least 1" not in result.output, result.output


def test_a_huge_number_is_told_the_bound_it_passed() -> None:
    result = CliRunner().invoke(main, ["up", "--tracker-port", "9" * 30], prog_name="muster")
    assert result.exit_code == 2 and "is out of range: give at most 65535" in result.output, result.output
    minus = CliRunner().invoke(main, ["cluster", "create", "web", "-t", "t", "-n", "-" + "9" * 30], prog_name="muster")
    assert minus.exit_code == 2 and "is out of range: give at least 1" in minus.output, minus.output
