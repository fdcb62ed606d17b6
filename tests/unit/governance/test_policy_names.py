"""A policy's name as `muster policy apply` gives it: the file's, or `--name`. `Bad-Name!.rego`
was stored as `Bad-Name-` without a word (and `policy delete Bad-Name!` then found nothing);
a name that is not one is refused before anything is sent, saying what a name is and how to
give one, in the words the governance service refuses it with over HTTP and the bus."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from contracts.governance import GovernanceAnswer
from muster.cli import main
from services.governance import cli
from services.governance.domain.entities import problems_of

SOURCE = 'package muster.n\nimport rego.v1\n\ndeny contains "no" if input.request.nodes > 10\n'
OFFLINE = {"NATS_URL": "nats://127.0.0.1:1"}
"""No bus: a refusal must come before the command connects (it would fail with exit 3)."""


def test_a_file_whose_name_is_not_a_policy_name_is_refused_saying_what_a_name_is(tmp_path: Path) -> None:
    bad = tmp_path / "Bad-Name!.rego"
    bad.write_text(SOURCE)
    ran = CliRunner(env=OFFLINE).invoke(main, ["policy", "apply", str(bad)])
    assert ran.exit_code == 2, ran.output
    assert (f"{bad}: its name 'Bad-Name!' (the file's, without .rego) is not a policy name: use 1 to 64 letters, digits, "
            "'-' and '_' (character 9 is '!'); rename the file, or give the policy a name with --name") in ran.output, ran.output
    wrong = CliRunner(env=OFFLINE).invoke(main, ["policy", "apply", str(bad), "--name", "still bad!"])
    assert wrong.exit_code == 2 and "--name 'still bad!' is not a policy name: use 1 to 64" in wrong.output, wrong.output
    # The service refuses it in the same words (HTTP's PUT and the bus reach it there).
    assert problems_of("policy", {"name": "Bad-Name!", "source": SOURCE})[1] == [
        "policy 'Bad-Name!': name: 'Bad-Name!' is not allowed here: use 1 to 64 letters, digits, '-' and '_' "
        "(character 9 is '!')"]


def test_name_gives_the_policy_its_name_and_only_with_one_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad, other = tmp_path / "Bad-Name!.rego", tmp_path / "other.rego"
    bad.write_text(SOURCE)
    other.write_text(SOURCE)
    sent: list[dict[str, Any]] = []

    async def asked(*_: Any, **body: Any) -> GovernanceAnswer:
        sent.extend(body["entities"])
        return GovernanceAnswer(ok=True, items=[{"kind": "policy", "name": e["name"], "version": 1, "action": "add"}
                                                for e in body["entities"]])

    monkeypatch.setattr(cli, "ask", asked)
    ran = CliRunner(env=OFFLINE).invoke(main, ["policy", "apply", str(bad), "--name", "bad-name"])
    assert ran.exit_code == 0 and "policy bad-name: version 1 (add)" in ran.output, ran.output
    assert [e["name"] for e in sent] == ["bad-name"]
    two = CliRunner(env=OFFLINE).invoke(main, ["policy", "apply", str(bad), str(other), "--name", "x"])
    assert two.exit_code == 2 and "--name names one policy: give one FILE with it" in two.output, two.output
    assert len(sent) == 1
