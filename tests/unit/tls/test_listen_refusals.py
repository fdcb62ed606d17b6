"""Plain TCP beyond loopback is refused with a reason, before anything listens (`muster tracker`,
`muster up`); --insecure-network lets it through."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from muster.runtime.cli import up
from services.tracker.entrypoint import main as tracker


@pytest.fixture(autouse=True)
def _no_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NATS_URL", raising=False)
    monkeypatch.delenv("MUSTER_INSECURE_NETWORK", raising=False)


def test_the_tracker_refuses_plain_http_beyond_loopback() -> None:
    result = CliRunner().invoke(tracker, ["--host", "0.0.0.0", "--port", "0"])
    assert result.exit_code == 2
    assert "refusing to listen on 0.0.0.0 without TLS" in result.output and "--insecure-network" in result.output
    half = CliRunner().invoke(tracker, ["--host", "127.0.0.1", "--tls-cert", __file__])
    assert half.exit_code == 2 and "--tls-cert and --tls-key go together" in half.output


def test_muster_up_refuses_a_network_address_without_tls_before_starting_anything(tmp_path: Path) -> None:
    result = CliRunner().invoke(up, ["--data-dir", str(tmp_path / "data"), "--host", "0.0.0.0"])
    assert result.exit_code == 2, result.output
    assert "refusing to listen on 0.0.0.0 without TLS" in result.output and "pass --tls" in result.output
    assert not (tmp_path / "data" / "nats").exists() and not (tmp_path / "data" / "tls").exists()


def test_muster_up_says_tls_first_when_the_tracker_port_is_taken_too(tmp_path: Path) -> None:
    """Walk of session 27: with the tracker's port taken (another `muster up` on 8080), `--host
    0.0.0.0` without TLS was told to pick another port, and only then that it needs TLS."""
    import socket

    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(up, ["--data-dir", str(tmp_path / "data"), "--host", "0.0.0.0", "--tracker-port", str(port)])
    assert result.exit_code == 2, result.output
    assert "refusing to listen on 0.0.0.0 without TLS" in result.output and "in use" not in result.output
