"""`muster schedule create ... -- OPERATION`: a refusal of the operation typed after `--` keeps
its own exit code (docs/governance.md: exit 4 when the requester's rights refused it, 2 for bad
input)."""

from __future__ import annotations

import re
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

    refusing.callback.muster_operation = True  # type: ignore[union-attr]  # an operation, as `cluster_op` marks one
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


def test_a_schedules_timing_is_listed_as_it_was_typed_with_its_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Walk of session 24: `schedule create weekly --cron '0 6 * * MON' --tz Europe/Paris` was
    listed `0 6 * * MON` beside its next tick `05:00 UTC`, an hour off to whoever did not remember
    the zone (the console said it); and `--every 10m` was listed `every 600 s`, in the CLI and the
    console, where a rule's `--expires 24h` is listed `24 h`."""
    from click.testing import CliRunner

    import services.governance.schedule_cli as schedule_cli
    from contracts.governance import GovernanceAnswer, Schedule
    from services.governance.domain.schedules import describe

    def item(name: str, **timing: Any) -> dict[str, Any]:
        entity = {"name": name, "verb": "check", "command": {"type": "CheckCluster", "cluster_id": "c1"}, "owner": "ada",
                  "text": "cluster check c1", **timing}
        return {"name": name, "entity": entity, "runs": [], "created_at": "2026-11-30T20:00:00+00:00"}

    items = [item("weekly", cron="0 6 * * MON", timezone="Europe/Paris"), item("nightly", cron="0 3 * * *"),
             item("often", every_s=600.0), item("odd", every_s=90.0)]

    async def listing(*_: Any, **__: Any) -> tuple[str, GovernanceAnswer]:
        return "acme", GovernanceAnswer(ok=True, items=items)

    monkeypatch.setattr(schedule_cli, "ask_in", listing)
    result = CliRunner().invoke(muster.cli.main, ["schedule", "list", "--nats-url", "nats://127.0.0.1:1"])
    assert result.exit_code == 0, result.output
    when = dict(re.split(r"\s{2,}", line)[:2] for line in result.stdout.splitlines()[1:])
    assert when == {"weekly": "0 6 * * MON (Europe/Paris)", "nightly": "0 3 * * *", "often": "every 10 min",
                    "odd": "every 90 s"}, result.stdout
    assert describe(Schedule.model_validate(items[2]["entity"])) == "every 10 min"  # the console's words
