"""`muster demo`, the README's first command, end to end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def test_demo_builds_shows_and_deletes_a_cluster(tmp_path: Path) -> None:
    # As a user runs it: no server named, no token of the test session (muster up makes its own).
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "MUSTER_TOKEN", "MUSTER_AUTH_SYSTEM_TOKEN")}
    done = subprocess.run(
        [sys.executable, "-m", "muster", "demo", "--nodes", "3", "--data-dir", str(tmp_path / "data")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=200,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "create accepted" in out and "succeeded" in out and "layout: 3 nodes" in out
    assert "deleted." in out and "everything stopped." in out
    assert (tmp_path / "data" / "logs" / "planner.log").stat().st_size > 0
