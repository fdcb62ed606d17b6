"""The options that wait take a duration as `--lease` does (muster/cli_support.py `Duration`):
`--timeout 10m` was "'10m' is not a valid float range" (click's words), and its seconds only."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from muster.cli import main
from muster.cli_support import Duration


def test_a_duration_is_read_as_people_type_it() -> None:
    duration = Duration()
    assert [duration.convert(t, None, None) for t in ("30", "0.5", "90s", "10m", "2h", "1d", 3600.0)] == \
        [30, 0.5, 90, 600, 7200, 86400, 3600]


@pytest.mark.parametrize(("args", "said"), [
    (["job", "wait", "0b0c5a59-6b1e-4d43-9d55-3f4a14b0b001", "--timeout", "ten"],
     "Invalid value for '--timeout': 'ten' is not a duration (e.g. 3600, 90s, 15m, 2h, 7d)"),
    (["job", "wait", "0b0c5a59-6b1e-4d43-9d55-3f4a14b0b001", "--timeout", "0"],
     "Invalid value for '--timeout': '0' is out of range: give at least 0.1 s"),
    (["cluster", "check", "web", "--wait", "--timeout", "inf"], "Invalid value for '--timeout': 'inf' is not a duration"),
    (["down", "--timeout", "0.5"], "Invalid value for '--timeout': '0.5' is out of range: give at least 1 s"),
])
def test_a_wait_that_is_none_is_refused_naming_the_option(args: list[str], said: str) -> None:
    result = CliRunner().invoke(main, args, prog_name="muster")
    assert result.exit_code == 2 and said in result.output, result.output
