"""Every command of `muster`, walked from click's tree, given a bad argument: it exits 2 with one
`Error:` line naming the option and what it takes, never a traceback. A number that is none was
click's `'abc' is not a valid integer range`; a path with a NUL raised ValueError out of click (a
traceback), one too long was `internal error (OSError: File name too long ...)` and an empty one
read the current folder (`muster catalog validate ''`: `0 entities: valid`).

Only what is refused before a command runs is given here (no bus, no tracker: it stays fast);
names and ids the commands check themselves have their own tests (test_empty_names.py,
test_job_id_typos.py)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from muster.cli import main
from muster.cli_support import Duration, FilePath, WholeNumber
from tests.unit.client.test_help_texts import commands

BAD: dict[type, tuple[str, ...]] = {WholeNumber: ("abc", "1.5", "9" * 30), Duration: ("abc", "-1"), click.Choice: ("nosuch",),
                                    FilePath: ("\x00", "", "é" * 200)}
CASES = [(tuple(name.split()), param, bad) for name, cmd in commands() for param in cmd.params if not getattr(param, "is_flag", False)
         for kind, values in BAD.items() if isinstance(param.type, kind) for bad in values]


def test_every_number_option_is_muster_s() -> None:
    """Click's INT, FLOAT, IntRange and FloatRange say a bad value in click's words: every option
    in a number takes a `WholeNumber` or a `Duration` (seconds)."""
    clicks = sorted(f"{name} {p.opts[0]}" for name, cmd in commands() for p in cmd.params
                    if isinstance(p.type, click.types.IntParamType | click.types.FloatParamType) and not isinstance(p.type, WholeNumber))
    assert clicks == []
    assert len([c for c in CASES if isinstance(c[1].type, WholeNumber)]) > 40  # (the walk found them)


@pytest.mark.parametrize(("args", "said"), [
    (["cluster", "create", "web", "-t", "hadoop-small", "-n", "abc"], "Invalid value for '--nodes' / '-n': 'abc' is not a whole number: give at least 1"),
    (["cluster", "expand", "web", "-n", "abc"], "Invalid value for '--nodes' / '-n': 'abc' is not a whole number: give at least 1"),
    (["cluster", "expand", "web", "-n", "0"], "Invalid value for '--nodes' / '-n': '0' is out of range: give at least 1"),
    (["up", "--tracker-port", "70000"], "Invalid value for '--tracker-port': '70000' is out of range: give at least 0 and at most 65535"),
    (["planner", "--task-timeout", "soon"], "Invalid value for '--task-timeout': 'soon' is not a duration (e.g. 3600, 90s, 15m, 2h, 7d)"),
    (["catalog", "validate", ""], "Invalid value for 'PATHS...': '' is empty: give a path"),
])
def test_a_bad_number_or_path_is_said_in_muster_s_words(args: list[str], said: str) -> None:
    result = CliRunner().invoke(main, args, prog_name="muster")
    assert result.exit_code == 2 and f"Error: {said}\n" in result.output, result.output


@pytest.mark.parametrize(("path", "param", "bad"), CASES, ids=[f"{' '.join(p)} {q.name}={b[:8]!r}" for p, q, b in CASES])
def test_every_command_refuses_a_bad_value_in_one_line_naming_it(tmp_path: object, path: tuple[str, ...], param: click.Parameter,
                                                                  bad: str) -> None:
    # The bad value first: click checks the values given in the order given, before any missing one.
    given = [param.opts[0], bad] if isinstance(param, click.Option) else [bad]
    result = CliRunner().invoke(main, [*path, *given], prog_name="muster", env={"NATS_URL": "nats://127.0.0.1:1"})
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert result.exit_code == 2 and "Traceback" not in result.output and len(errors) == 1, result.output
    named = param.opts if isinstance(param, click.Option) else [param.make_metavar(click.Context(click.Command("x")))]
    assert any(f"'{n}'" in errors[0] for n in named), errors[0]
