"""`--wait-for-hosts` of `muster cluster create|expand` refuses what no deadline is, naming the
option, before anything is sent (walk of session 33: `nan` and `inf` went to the planner and came
back as "invalid request: wait_s: nan is over the limit: at most 2592000.0"), and takes a
duration as `--lease` does (`10m` was "not a valid float range", session 34)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from muster.cli import main
from muster.ops_cli import wait_seconds

TIMES = "give more than 0 and at most 30 days (e.g. 600, 10m, 2h, 7d)"


@pytest.mark.parametrize("given,said", [
    ("nan", "--wait-for-hosts: 'nan' is not a duration (e.g. 3600, 90s, 15m, 2h, 7d)"),
    ("inf", "--wait-for-hosts: 'inf' is not a duration"),
    ("abc", "--wait-for-hosts: 'abc' is not a duration"),
    ("0", f"--wait-for-hosts: '0' is no time: {TIMES}"),
    ("31d", f"--wait-for-hosts: '31d' is over 30 days: {TIMES}"),
])
def test_what_no_deadline_is_is_refused_naming_the_option(given: str, said: str) -> None:
    result = CliRunner().invoke(main, ["cluster", "create", "shop", "-t", "app-on-pool", "-n", "2", "--wait-for-hosts", given,
                                       "--nats-url", "nats://127.0.0.1:1"], prog_name="muster")
    assert result.exit_code == 2 and said in result.output, result.output
    assert "wait_s" not in result.output


def test_a_wait_is_a_duration_as_a_lease_is() -> None:
    assert [wait_seconds(t) for t in ("600", "90s", "10m", "2h", "30d", "0.5")] == [600, 90, 600, 7200, 30 * 86400, 0.5]
    assert wait_seconds(None) is None
