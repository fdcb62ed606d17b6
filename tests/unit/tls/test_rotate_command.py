"""`muster tls rotate` on a deployment without TLS: refused at once, in the shell that asked.
Before, it signalled `muster up`, exited 0 saying "it says when it has", and the refusal went
to `muster up`'s own terminal only."""

from __future__ import annotations

import subprocess
from pathlib import Path

from click.testing import CliRunner

from muster.bus.server import DataDirLock
from muster.tls.cli import tls


def test_rotate_refuses_a_deployment_without_tls_and_signals_nothing(tmp_path: Path) -> None:
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
