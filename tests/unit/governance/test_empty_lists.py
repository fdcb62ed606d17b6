"""A tenant with no rules, policies, subscriptions or schedules is told so in a sentence (as
`muster cluster list` says `no clusters`), not with a bare header line that reads like a listing
that failed."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from contracts.governance import GovernanceAnswer
from muster.cli import main
from services.governance import cli


@pytest.mark.parametrize(("command", "said"), [
    (["policy", "list"], "no policies in tenant beta: no request is refused or warned of by one"),
    (["rule", "list"], "no approval rules in tenant beta: no request waits for an approver"),
    (["notify", "list"], "no subscriptions in tenant beta: nothing is notified"),
    (["schedule", "list"], "no schedules in tenant beta"),
])
def test_an_empty_governance_list_says_the_tenant_has_none(command: list[str], said: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async def answered(*_: Any, **__: Any) -> tuple[str, GovernanceAnswer]:
        return "beta", GovernanceAnswer(ok=True)

    monkeypatch.setattr(cli, "ask_in", answered)
    monkeypatch.setattr("services.governance.schedule_cli.ask_in", answered)
    result = CliRunner(env={"NATS_URL": "nats://127.0.0.1:1"}).invoke(main, command)
    assert result.exit_code == 0 and said in result.output and "LAST" not in result.output and "VERSION" not in result.output and "MATCHES" not in result.output, result.output


def test_a_rules_expiry_reads_as_the_console_says_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """`rule list` said `86400 s` of a rule the console's governance page shows `24 h` of (and
    `--expires 24h` made): one way to say a length of time (muster/durations.py)."""
    from muster.durations import spoken

    entity = {"operations": ["delete"], "clusters": ["prod-*"], "labels": {}, "expires_after_s": 86400.0, "allow_self_approval": False}

    async def answered(*_: Any, **__: Any) -> tuple[str, GovernanceAnswer]:
        return "acme", GovernanceAnswer(ok=True, items=[{"name": "prod-deletes", "entity": entity, "by": "ada"}])

    monkeypatch.setattr(cli, "ask_in", answered)
    result = CliRunner(env={"NATS_URL": "nats://127.0.0.1:1", "COLUMNS": "200"}).invoke(main, ["rule", "list"])
    assert result.exit_code == 0 and "24 h" in result.output and "86400" not in result.output, result.output
    assert [spoken(s) for s in (30, 90, 600, 3600, 5400, 86400, 172800, 7 * 86400)] == [
        "30 s", "90 s", "10 min", "1 h", "90 min", "24 h", "2 d", "7 d"]
