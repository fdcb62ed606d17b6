"""`--data-dir` finds the deployment's credentials as `$MUSTER_DATA_DIR` does (walked in session
26: `muster cluster create --data-dir /elsewhere/.muster` found the NATS URL there, then was
refused by the bus, "the token from none", since only the variable led to the credentials)."""

from __future__ import annotations

import os
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from muster.bus.connect import credentials, write_credentials_file
from muster.cli_bus import Bus, bus_options, refused_message

TOKEN = f"mst_alice_{'a' * 12}_{'b' * 64}"


@click.command()
@bus_options(tenant=False)
def whose(bus: Bus) -> None:
    found = credentials()
    click.echo(f"{found.principal} {found.source}")


@pytest.fixture(autouse=True)
def no_credentials_around(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("MUSTER_TOKEN", "MUSTER_CREDENTIALS", "MUSTER_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")


def test_the_credentials_in_the_data_dir_given_are_used(tmp_path: Path) -> None:
    data_dir = tmp_path / "work" / ".muster"
    write_credentials_file(data_dir / "credentials", TOKEN)
    result = CliRunner().invoke(whose, ["--data-dir", str(data_dir)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"alice {data_dir / 'credentials'}"
    assert "MUSTER_DATA_DIR" not in os.environ  # (the test's process keeps its environment)


def test_a_token_of_the_callers_own_wins_over_the_data_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data_dir = tmp_path / "work" / ".muster"
    write_credentials_file(data_dir / "credentials", TOKEN)
    write_credentials_file(tmp_path / "bob.cred", f"mst_bob_{'a' * 12}_{'b' * 64}")
    monkeypatch.setenv("MUSTER_CREDENTIALS", str(tmp_path / "bob.cred"))
    result = CliRunner().invoke(whose, ["--data-dir", str(data_dir)])
    assert result.output.strip() == f"bob {tmp_path / 'bob.cred'}", result.output


def test_no_token_at_all_is_said_so_with_where_it_was_looked_for() -> None:
    said = refused_message(credentials().source)
    assert "from none" not in said
    assert said.startswith("the bus refused a client without a token: none in $MUSTER_TOKEN, $MUSTER_CREDENTIALS,"), said


def test_a_data_dir_that_is_not_there_is_named_when_nothing_answers_at_the_default(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A mistyped `--data-dir` fell back to the default URLs in silence: `cannot reach the
    tracker at http://127.0.0.1:8080`, as if muster were down."""
    from muster import cli_bus
    from muster.bus import connect
    from muster.cli import main
    from tests.ports import refused_port

    missing = tmp_path / "no-such" / ".muster"
    # (defaults where nothing listens: another `muster up` on this machine may have 8080)
    with refused_port() as tracker, refused_port() as nats:
        monkeypatch.setattr(cli_bus, "DEFAULT_TRACKER_URL", f"http://127.0.0.1:{tracker}")
        monkeypatch.setattr(connect, "DEFAULT_URL", f"nats://127.0.0.1:{nats}")
        for command in (["cluster", "list"], ["cluster", "delete", "c1"]):  # the tracker's read, NATS's request
            result = CliRunner().invoke(main, [*command, "--data-dir", str(missing)],
                                        env={"NATS_URL": None, "MUSTER_TRACKER_URL": None})
            assert result.exit_code == 3, result.output
            assert f"no data directory {missing}" in result.output, result.output


def test_where_it_looked_names_each_file_once() -> None:
    """Walk of session 27: the default `--data-dir .muster` named `.muster/credentials` twice."""
    from muster.bus.connect import DATA_DIR, looked_in

    reset = DATA_DIR.set(Path(".muster"))
    try:
        said = looked_in()
    finally:
        DATA_DIR.reset(reset)
    assert said.count(".muster/credentials") == 1, said
