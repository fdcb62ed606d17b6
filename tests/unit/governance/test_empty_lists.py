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
