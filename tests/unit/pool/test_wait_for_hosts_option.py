"""`--wait-for-hosts` of `muster cluster create|expand` refuses what no deadline is, naming the
option, before anything is sent (walk of session 33: `nan` and `inf` went to the planner and came
back as "invalid request: wait_s: nan is over the limit: at most 2592000.0")."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from muster.cli import main


@pytest.mark.parametrize("given,said", [
    ("nan", "--wait-for-hosts: 'nan' is not a number of seconds"),
    ("inf", "Invalid value for '--wait-for-hosts': inf is not in the range 0.001<=x<=2592000"),
    ("0", "Invalid value for '--wait-for-hosts': 0.0 is not in the range 0.001<=x<=2592000"),
])
def test_what_no_deadline_is_is_refused_naming_the_option(given: str, said: str) -> None:
    result = CliRunner().invoke(main, ["cluster", "create", "shop", "-t", "app-on-pool", "-n", "2", "--wait-for-hosts", given,
                                       "--nats-url", "nats://127.0.0.1:1"], prog_name="muster")
    assert result.exit_code == 2 and said in result.output, result.output
    assert "wait_s" not in result.output
