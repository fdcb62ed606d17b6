"""`muster schedule create ... -- OPERATION`: a refusal of the operation typed after `--` keeps
its own exit code (docs/governance.md: exit 4 when the requester's rights refused it, 2 for bad
input)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click
import pytest

import muster.cli
from muster.cli_support import EXIT_DENIED, EXIT_INVALID, CliError
from services.governance.schedule_cli import _captured


@pytest.mark.parametrize("code", [EXIT_DENIED, EXIT_INVALID])
def test_the_operations_refusal_keeps_its_exit_code(code: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    @click.command()
    @click.argument("words", nargs=-1)
    @click.option("--data-dir")
    def refusing(**_: Any) -> None:
        raise CliError("refused: uma has no read permission on cluster c2", code)

    monkeypatch.setattr(muster.cli, "main", refusing)
    bus = SimpleNamespace(asked=None, data_dir=tmp_path, explicit_url=None)
    with pytest.raises(CliError) as refused:
        _captured(("cluster", "check", "c2"), bus)  # type: ignore[arg-type]
    assert refused.value.exit_code == code
    assert refused.value.format_message() == "`cluster check c2`: refused: uma has no read permission on cluster c2"


@pytest.mark.parametrize("verb", ["pause", "resume"])
def test_a_pause_is_asked_by_name_and_a_refusal_names_the_command_typed(verb: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The owner of a schedule without `read` on the tenant typed `muster schedule pause nightly`:
    the command listed the schedule to put it back paused, and was refused the list. It asks the
    service to pause it by name (verb `pause`), and a refusal names the command typed."""
    from click.testing import CliRunner

    import services.governance.schedule_cli as schedule_cli
    from contracts.governance import GovernanceAnswer
    from services.governance.cli import refusal

    asked: list[tuple[str, str, dict[str, Any]]] = []

    async def refused(bus: Any, verb_: str, kind: str, as_json: bool = False, said: str = "", **body: Any) -> Any:
        asked.append((verb_, kind, body))
        raise refusal(said, GovernanceAnswer(ok=False, reason="not paused: alice has no execute permission on cluster c1",
                                             code="forbidden"), as_json)

    monkeypatch.setattr(schedule_cli, "ask", refused)
    result = CliRunner().invoke(muster.cli.main, ["schedule", verb, "nightly", "--nats-url", "nats://127.0.0.1:1"])
    assert asked == [(verb, "schedule", {"name": "nightly"})]
    assert result.exit_code == EXIT_DENIED, result.output
    assert result.stderr == f"Error: schedule {verb} refused: not paused: alice has no execute permission on cluster c1\n"


@pytest.mark.parametrize(("timing", "said"), [
    (["--cron", "0 3 * * *", "--every", "10m"], "Error: --cron and --every both given: a schedule has one of them, either a cron "
                                                "or an interval\n"),
    ([], "Error: when does it run? give --cron '0 3 * * *' (a cron expression) or --every 10m (an interval)\n")])
def test_the_timing_given_twice_or_not_at_all_is_said_as_that(timing: list[str], said: str) -> None:
    """Walk of session 23: `--cron X --every Y` was told "give one of --cron and --every", read as
    "at least one"; and so was a schedule with neither."""
    from click.testing import CliRunner

    result = CliRunner().invoke(muster.cli.main, ["schedule", "create", "x", *timing, "--nats-url", "nats://127.0.0.1:1",
                                                  "--", "cluster", "check", "web"])
    assert (result.exit_code, result.stderr) == (2, said), result.output
