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
