"""`muster catalog get` (or `delete`) without KIND: click's bare "Missing argument 'KIND'" named
no kind (a user walk met it); the error lists the kinds and gives an example."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from contracts.catalog import KINDS
from muster.cli import main


@pytest.mark.parametrize(("args", "example"), [(["get"], "muster catalog get clustertemplates"),
                                               (["delete"], "muster catalog delete services NAME")])
def test_a_missing_kind_lists_the_kinds_and_an_example(args: list[str], example: str) -> None:
    result = CliRunner().invoke(main, ["catalog", *args], prog_name="muster")
    assert result.exit_code == 2
    assert all(k in result.output for k in KINDS) and example in result.output


def test_a_missing_name_of_delete_is_still_clicks_own() -> None:
    result = CliRunner().invoke(main, ["catalog", "delete", "services"])
    assert result.exit_code == 2 and "Missing argument 'NAME'" in result.output
