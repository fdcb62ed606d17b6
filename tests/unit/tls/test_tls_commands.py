"""The TLS commands' refusals of bad input, said where they were typed: `muster tls rotate` on a
deployment without TLS, and a certificate name no client can dial (`--tls-name`, `tls issue`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from muster.bus.server import DataDirLock
from muster.tls.cli import tls


def test_rotate_refuses_a_deployment_without_tls_and_signals_nothing(tmp_path: Path) -> None:
    """Before, it signalled `muster up`, exited 0 saying "it says when it has", and the refusal
    went to `muster up`'s own terminal only."""
    data_dir = tmp_path / ".muster"
    data_dir.mkdir()
    stand_in = subprocess.Popen(["sleep", "60"])  # the deployment's `muster up`: a signal would end it
    lock = DataDirLock(data_dir).acquire()
    try:
        lock.describe(pid=stand_in.pid, nats_url="nats://127.0.0.1:4222", tracker_url="http://127.0.0.1:8080")
        result = CliRunner().invoke(tls, ["rotate", "--data-dir", str(data_dir)])
        assert result.exit_code == 2, result.output
        assert f"the deployment in {data_dir} runs without TLS (http://127.0.0.1:8080): nothing to rotate" in result.output
        assert stand_in.poll() is None
    finally:
        lock.release()
        stand_in.kill()
        stand_in.wait()


@pytest.mark.parametrize(("command", "absent"), [(["tls", "rotate"], "its certificates are checked at its next start"),
                                                 (["reload"], "its services read their files at its next start")])
def test_a_signal_to_no_running_deployment_is_refused_naming_the_directory(command: list[str], absent: str,
                                                                          tmp_path: Path) -> None:
    """`muster tls rotate` and `muster reload` share how they find the running `muster up`."""
    from muster.cli import main

    missing = tmp_path / "nowhere"
    result = CliRunner().invoke(main, [*command, "--data-dir", str(missing)])
    assert result.exit_code == 2 and f"no data directory {missing}: pass --data-dir" in result.output, result.output
    idle = tmp_path / ".muster"
    idle.mkdir()
    DataDirLock(idle).acquire().release()  # a deployment ran there once and stopped
    result = CliRunner().invoke(main, [*command, "--data-dir", str(idle)])
    assert result.exit_code == 2 and f"no muster deployment runs in {idle}: {absent}" in result.output, result.output


@pytest.mark.parametrize("name", ["bad name", "nats.example:4222", "tls://nats.example", "-x.example", "a..b"])
def test_a_tls_name_that_no_client_can_dial_is_refused_before_anything_starts(tmp_path: Path, name: str) -> None:
    """`muster up --tls --tls-name 'bad name'` wrote `DNS:bad name` into the certificates and
    started; `muster tls issue x=host:4222` the same."""
    from muster.runtime.cli import up

    broken = tmp_path / "catalog" / "providers"  # were the name taken, `up` stops at the catalog, before it starts anything
    broken.mkdir(parents=True)
    (broken / "x.json").write_text("{")
    result = CliRunner().invoke(up, ["--tls", "--tls-name", name, "--data-dir", str(tmp_path / "data"),
                                     "--catalog", str(broken.parent), "--tracker-port", "0"])
    assert result.exit_code == 2, result.output
    assert f"{name!r} is not a DNS name or an IP address" in result.output
    issued = CliRunner().invoke(tls, ["issue", "--dir", str(tmp_path / "ca"), f"x=localhost,{name}"])
    assert issued.exit_code == 2 and f"{name!r} is not a DNS name or an IP address" in issued.output, issued.output
    assert not (tmp_path / "ca").exists()


@pytest.mark.parametrize("name", ["nats.example", "*.example.org", "10.0.0.1", "::1", "muster_nats_1", "host."])
def test_dns_names_and_addresses_are_taken(name: str) -> None:
    from muster.tls.ca import host_problem

    assert host_problem(name) is None


def test_issue_refuses_a_server_without_hosts_before_it_makes_anything(tmp_path: Path) -> None:
    """`muster tls issue --dir ca good=localhost nats` made the CA and good's pair, then refused nats."""
    result = CliRunner().invoke(tls, ["issue", "--dir", str(tmp_path / "ca"), "good=localhost", "nats"])
    assert result.exit_code == 2 and "nats: a server certificate needs the host names clients reach it by" in result.output
    assert not (tmp_path / "ca").exists()
