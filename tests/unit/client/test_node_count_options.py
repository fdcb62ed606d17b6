"""Every command that takes a node count takes it the same way: `create -n 5`, `expand -n 7`
(expand and shrink had only `--nodes`)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from muster.cli import main


@pytest.mark.parametrize("verb", ["create", "expand", "shrink"])
def test_a_node_count_is_dash_n_or_nodes(verb: str) -> None:
    shown = CliRunner().invoke(main, ["cluster", verb, "--help"], terminal_width=200)
    assert shown.exit_code == 0 and "-n, --nodes" in shown.output, shown.output
