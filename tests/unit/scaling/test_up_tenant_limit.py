"""`muster up --tenant-limit` reaches every planner it starts (docs/planner.md, "Concurrency
limits"); a bad value is refused before anything starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from muster.runtime import cli
from muster.runtime.supervisor import Deployment


class _Stop(Exception):
    pass


def test_up_passes_its_tenant_limits_to_every_planner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Deployment] = []

    def deployment(*args: Any, **kwargs: Any) -> Deployment:
        made = Deployment(*args, **kwargs)
        seen.append(made)
        raise _Stop

    monkeypatch.setattr(cli, "Deployment", deployment)
    result = CliRunner().invoke(cli.up, ["--data-dir", str(tmp_path), "--tracker-port", "0", "--planners", "2",
                                         "--tenant-limit", "3", "--tenant-limit", "acme=1"])
    assert seen, result.output  # made, then stopped before anything starts
    commands = seen[0].commands()
    for planner in ("planner-1", "planner-2"):
        args = commands[planner]
        assert args[0] == "planner"
        assert [args[i + 1] for i, a in enumerate(args) if a == "--tenant-limit"] == ["3", "acme=1"]
    assert "--tenant-limit" not in commands["provisioner"]


def test_up_refuses_a_bad_tenant_limit_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "Deployment", None)  # nothing may start
    result = CliRunner().invoke(cli.up, ["--data-dir", str(tmp_path), "--tenant-limit", "acme=0"])
    assert result.exit_code == 2
    assert "'acme=0': give N or TENANT=N with N >= 1" in result.output


def _commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> dict[str, list[str]]:
    seen: list[Deployment] = []

    def deployment(*a: Any, **kw: Any) -> Deployment:
        seen.append(Deployment(*a, **kw))
        raise _Stop

    monkeypatch.setattr(cli, "Deployment", deployment)
    result = CliRunner().invoke(cli.up, ["--data-dir", str(tmp_path), "--tracker-port", "0", *args])
    assert seen, result.output
    return seen[0].commands()


def test_up_passes_its_policy_deadline_to_every_planner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Policies run in each planner's sandbox child (docs/governance.md, "A policy that runs too long")."""
    commands = _commands(tmp_path, monkeypatch, "--planners", "2", "--policy-deadline", "0.5")
    for planner in ("planner-1", "planner-2"):
        args = commands[planner]
        assert [args[i + 1] for i, a in enumerate(args) if a == "--policy-deadline"] == ["0.5"]
    assert all("--policy-deadline" not in args for name, args in commands.items() if not name.startswith("planner"))


def test_up_leaves_the_planners_own_policy_deadline_when_not_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "--policy-deadline" not in _commands(tmp_path, monkeypatch)["planner"]


def test_up_refuses_a_policy_deadline_the_planner_would_refuse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "Deployment", None)  # nothing may start
    result = CliRunner().invoke(cli.up, ["--data-dir", str(tmp_path), "--policy-deadline", "0"])
    assert result.exit_code == 2 and "--policy-deadline" in result.output
