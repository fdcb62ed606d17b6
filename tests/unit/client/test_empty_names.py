"""Names given empty (`--services "$EMPTY"`, `muster cluster stop web ''`, `--nodes ,`) are
refused naming the option. They were read as none given: a create got the template's services,
a stop or a restart every service or every node, an add-services a pydantic sentence
(`invalid request: services: Input should be a valid list`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from muster.cli import main
from muster.cli_support import CliError
from muster.ops_session import chosen


def test_names_given_empty_are_refused_naming_the_option() -> None:
    assert chosen((), "--services", "the template's services") is None
    assert chosen(("a,b", "c"), "SERVICES") == ["a", "b", "c"]
    with pytest.raises(CliError) as err:
        chosen(("",), "--services", "the template's services")
    assert err.value.message == "--services: no service named, only '' (leave --services out for the template's services)"
    with pytest.raises(CliError) as err:
        chosen((",", ""), "--nodes", "every node")
    assert err.value.message == "--nodes: no node named, only ',', '' (leave --nodes out for every node)"
    assert chosen((" ,",), "SERVICES") == [" "]  # a blank is a name: the planner refuses it as unknown, quoted


def test_a_create_given_empty_services_is_refused_before_anything_is_sent() -> None:
    ran = CliRunner().invoke(main, ["cluster", "create", "web", "-t", "hadoop-small", "-n", "3", "--services", "",
                                    "--nats-url", "nats://127.0.0.1:1", "--dry-run"])
    assert ran.exit_code == 2 and "--services: no service named, only ''" in ran.output, ran.output
    assert "unreachable" not in ran.output and "cannot reach" not in ran.output, ran.output


def test_a_create_config_that_is_no_object_is_refused_naming_the_option(tmp_path: Path) -> None:
    """`--config @list.yaml` said `invalid request: config: Input should be a valid dictionary`."""
    listed = tmp_path / "list.yaml"
    listed.write_text("- 1\n")
    ran = CliRunner().invoke(main, ["cluster", "create", "web", "-t", "hadoop-small", "-n", "3", "--config", f"@{listed}",
                                    "--nats-url", "nats://127.0.0.1:1", "--dry-run"])
    assert ran.exit_code == 2 and "--config must be a JSON object (in YAML, a mapping)" in ran.output, ran.output
