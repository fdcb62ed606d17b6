"""`muster up --tenant` and `muster demo --tenant`: a name the auth service would refuse is
named before anything starts (it started everything, then the auth service died naming it in
its log); a catalog `muster up --catalog` cannot apply is bad input, said as such (it read as
an internal error, exit 1)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from muster.catalog.problems import Problem
from muster.cli_support import EXIT_INVALID, CliError
from muster.runtime import cli


class _Started(Exception):
    pass


@pytest.mark.parametrize("command, tenants, named", [(cli.up, "bad tenant", "'bad tenant'"), (cli.up, "default,_x", "'_x'"),
                                                     (cli.up, ",", "''"), (cli.demo, "bad tenant", "'bad tenant'"),
                                                     (cli.demo, "default,acme", "'default,acme'")])
def test_a_tenant_name_the_auth_service_refuses_is_named_before_anything_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: Any, tenants: str, named: str) -> None:
    def deployment(*_: Any, **__: Any) -> None:
        raise _Started

    monkeypatch.setattr(cli, "Deployment", deployment)
    result = CliRunner().invoke(command, ["--data-dir", str(tmp_path / "data"), "--tenant", tenants])
    assert result.exit_code == 2 and not isinstance(result.exception, _Started), result.output
    assert f"Invalid value for '--tenant': tenant {named} is not a valid name" in result.output
    assert not (tmp_path / "data").exists()


def test_good_tenant_names_go_on_to_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def deployment(*_: Any, **__: Any) -> None:
        raise _Started

    monkeypatch.setattr(cli, "Deployment", deployment)
    result = CliRunner().invoke(cli.up, ["--data-dir", str(tmp_path), "--tenant", "default,acme-2"])
    assert "_Started" in result.output and "--tenant" not in result.output  # on to make the deployment


def test_a_catalog_the_log_refuses_is_bad_input_naming_the_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from muster.catalog.store import CatalogRejected

    async def refuse(*_: Any, **__: Any) -> int:
        raise CatalogRejected([Problem("services", "dn", "dependencies", "requires 'base', which no service in the catalog is "
                                       "or provides", source="services/dn.json")])

    class Client:
        nc = None

    monkeypatch.setattr(cli, "apply_catalog", refuse)
    monkeypatch.setattr(cli, "EventStore", lambda nc: None)
    with pytest.raises(CliError) as raised:
        asyncio.run(cli._load_catalog(Client(), "default", cli.read_catalog(cli.DEMO_CATALOG), cli.DEMO_CATALOG))  # type: ignore[arg-type]
    assert raised.value.exit_code == EXIT_INVALID
    assert str(raised.value).startswith("catalog not applied: 1 error; first: ")
    assert "requires 'base'" in str(raised.value) and f"`muster catalog validate {cli.DEMO_CATALOG}` lists every problem" in str(raised.value)
