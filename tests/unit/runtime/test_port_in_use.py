"""A tracker port in use is the user's choice refused: `muster up` names the port and exits 2,
as it does for a data directory in use (docs/runtime.md; docs/client.md, "Exit codes")."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from muster.cli import main
from muster.cli_support import EXIT_FAILED, EXIT_INVALID
from muster.runtime.supervisor import Child, Deployment, StartError, StartRefused, port_problem


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2"])
def test_muster_up_on_a_tracker_port_in_use_names_it_and_exits_2(tmp_path: Path, host: str) -> None:
    """127.0.0.2: the port was checked on 127.0.0.1 alone, so one taken on the address the
    tracker listens on was found by the tracker, which exited during start (exit 1)."""
    with socket.socket() as taken:
        taken.bind((host, 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner(env={"NATS_URL": None}).invoke(
            main, ["up", "--data-dir", str(tmp_path), "--tracker-port", str(port), "--host", host])
    assert result.exit_code == EXIT_INVALID, result.output
    assert f"tracker port {port} on {host} is in use by another program: pass another --tracker-port" in result.output
    assert "Traceback" not in result.output


def test_a_free_port_has_no_problem_and_an_address_of_another_machine_has_one() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert port_problem("127.0.0.1", port) == ""
    assert port_problem("192.0.2.1", port).startswith("cannot be bound: ")  # (TEST-NET-1: no machine's own)


async def _exits(tmp_path: Path, status: int) -> BaseException | None:
    """A child that says why in its last line and exits with `status` during start."""
    line = '{"event": "cannot start", "error": "cannot listen on 127.0.0.1:8080: the port is in use by another program"}'
    code = f"import sys; sys.stderr.write({line!r} + '\\n'); sys.exit({status})"
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", code, stderr=asyncio.subprocess.PIPE)
    child = Child("tracker", process, tmp_path / "tracker.log")
    ready = asyncio.get_running_loop().create_future()
    await asyncio.wait_for(Deployment(tmp_path)._copy(child, ready), 30)
    return ready.exception()


async def test_a_child_that_refuses_its_setting_at_start_is_bad_input(tmp_path: Path) -> None:
    """The port taken between our check and the tracker's bind: the tracker exits 2, and the
    start is refused as if we had found it first; any other exit is a failure (exit 1)."""
    refused = await _exits(tmp_path, EXIT_INVALID)
    assert isinstance(refused, StartRefused) and "tracker exited during start: cannot listen on 127.0.0.1:8080" in str(refused)
    failed = await _exits(tmp_path, EXIT_FAILED)
    assert isinstance(failed, StartError) and not isinstance(failed, StartRefused)


@pytest.mark.parametrize("port", ["0", "8090"])
def test_muster_up_on_an_address_of_another_machine_names_the_host_before_anything_starts(tmp_path: Path, port: str) -> None:
    """Walked in session 26: with --tracker-port 0 nats-server failed first ("did not become
    ready on port N; see its log"); with a port, "tracker port 8090 ... pass another
    --tracker-port", which no port mends."""
    result = CliRunner(env={"NATS_URL": None}).invoke(
        main, ["up", "--data-dir", str(tmp_path), "--tracker-port", port, "--host", "192.0.2.1", "--tls"])
    assert result.exit_code == EXIT_INVALID, result.output
    assert "--host 192.0.2.1 is not an address of this machine" in result.output, result.output
    assert "--tracker-port" not in result.output and not (tmp_path / "nats").exists()


@pytest.mark.parametrize("capacity", ["0", "-2"])
def test_muster_up_refuses_a_capacity_below_one_before_anything_starts(tmp_path: Path, capacity: str) -> None:
    """It started nats-server and every service, then the provisioner refused it."""
    result = CliRunner(env={"NATS_URL": None}).invoke(main, ["up", "--data-dir", str(tmp_path), "--capacity", capacity])
    assert result.exit_code == EXIT_INVALID, result.output
    assert "Invalid value for '--capacity'" in result.output and not (tmp_path / "nats").exists()
