"""`muster up --webhook-allow` reaches the notifier, the pool service and the planners it starts
(one setting for webhooks and pool callbacks, which a planner checks when no pool service
answers: docs/governance.md, "Where webhooks may go", docs/pools.md);
a bad entry is refused by name before anything starts, by `muster up`, `muster notifier` and
`muster pool serve` alike, and each service reads the setting from the environment too."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from muster.runtime import cli
from muster.runtime.supervisor import Deployment
from services.notifier import entrypoint
from services.planner import entrypoint as planner_entrypoint
from services.pool import entrypoint as pool_entrypoint


class _Stop(Exception):
    pass


def test_up_passes_its_webhook_allowlist_to_the_notifier_the_pool_service_and_the_planners(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Deployment] = []

    def deployment(*args: Any, **kwargs: Any) -> Deployment:
        seen.append(Deployment(*args, **kwargs))
        raise _Stop

    monkeypatch.setattr(cli, "Deployment", deployment)
    result = CliRunner().invoke(cli.up, ["--data-dir", str(tmp_path), "--tracker-port", "0",
                                         "--webhook-allow", "10.20.0.0/16", "--webhook-allow", "alerts.internal:8443"])
    assert seen, result.output
    commands = seen[0].commands()
    for service in ("notifier", "pool", "planner"):
        args = commands[service]
        assert [args[i + 1] for i, a in enumerate(args) if a == "--webhook-allow"] == ["10.20.0.0/16", "alerts.internal:8443"]
    assert all("--webhook-allow" not in a for name, a in commands.items() if name not in ("notifier", "pool", "planner"))


def test_a_bad_entry_is_refused_before_anything_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "Deployment", lambda *a, **k: pytest.fail("started"))
    result = CliRunner().invoke(cli.up, ["--data-dir", str(tmp_path), "--webhook-allow", "http://alerts"])
    assert result.exit_code == 2 and "--webhook-allow 'http://alerts' is neither an address" in result.output, result.output
    monkeypatch.setattr(entrypoint, "main_for", lambda *a, **k: pytest.fail("started"))
    refused = CliRunner(env={"MUSTER_WEBHOOK_ALLOW": "10.0.0.0/8,bad/name"}).invoke(entrypoint.main, [])
    assert refused.exit_code == 2 and "'bad/name' is neither an address" in refused.output, refused.output
    monkeypatch.setattr(pool_entrypoint, "main_for", lambda *a, **k: pytest.fail("started"))
    refused = CliRunner(env={"MUSTER_WEBHOOK_ALLOW": "10.0.0.0/8,bad/name"}).invoke(pool_entrypoint.serve, [])
    assert refused.exit_code == 2 and "'bad/name' is neither an address" in refused.output, refused.output


@pytest.mark.parametrize(("module", "command", "starter"), [
    (entrypoint, "main", "start_notifier"), (pool_entrypoint, "serve", "start_pool_service"),
    (planner_entrypoint, "main", "start_planner"),
], ids=["notifier", "pool service", "planner"])
def test_each_sender_reads_the_allowlist_from_the_environment(module: Any, command: str, starter: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[Any] = []
    given: dict[str, Any] = {}

    async def start(*args: Any, **kwargs: Any) -> None:
        given.update(kwargs, args=args)

    monkeypatch.setattr(module, "main_for", lambda name, url, setup: started.append(setup))
    monkeypatch.setattr(module, starter, start)
    result = CliRunner(env={"MUSTER_WEBHOOK_ALLOW": "10.0.0.0/8, alerts.internal"}).invoke(getattr(module, command), [])
    assert result.exit_code == 0 and started, result.output
    asyncio.run(started[0](None, None))
    allowed = given["allowed"] if "allowed" in given else given["args"][2].callbacks_allowed  # the planner's config
    assert str(allowed) == "10.0.0.0/8, alerts.internal"
