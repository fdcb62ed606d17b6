"""`muster demo`, the README's first command, end to end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
LONG = pytest.mark.skipif(os.environ.get("MUSTER_LONG_TESTS") != "1", reason="long: MUSTER_LONG_TESTS=1 (make test-long)")


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
    assert f"logs {tmp_path / 'data' / 'logs'}\n" in out  # a line is not cut at 80 columns in a pipe


# Long since session 25 (docs/testing.md, "Long scenarios"): one more whole `muster demo` for its
# `--pool`; the demo's fast case is the one above, a job waiting for a pool's hosts and getting
# them over SSH tests/fault/test_pools.py's and tests/browser/test_pools_page.py's.
@LONG
def test_demo_on_a_pool_shows_a_cluster_waiting_for_hosts_and_getting_them(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "MUSTER_TOKEN", "MUSTER_AUTH_SYSTEM_TOKEN")}
    done = subprocess.run(
        [sys.executable, "-m", "muster", "demo", "--pool"],  # as the README has it: the data in ./.muster
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=200,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "4 hosts registered in pool lab" in out
    assert "create of shop (3 nodes) accepted at once" in out and "create of blog (2 nodes) accepted at once" in out
    assert "is waiting_for_resources: waiting for 2 hosts of pool lab: 1st in line" in out
    assert out.index("waiting for 2 hosts") < out.index("deleting shop") < out.rindex("pool lab: 4 hosts, 4 free, 0 waiting")
    assert "everything stopped." in out
    # The hosts ran the services' scripts over SSH, and the release command wiped them again.
    hosts = tmp_path / ".muster" / "pool-hosts"
    assert hosts.is_dir() and not list(hosts.glob("*/app"))
    # Again on the same data directory (walk of session 27): the new run's hosts were registered
    # over the last run's, every one ambiguous, and the demo waited 10 minutes for hosts.
    again = subprocess.run([sys.executable, "-m", "muster", "demo", "--pool"], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=200)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "pool lab: the 4 hosts of an earlier run on .muster removed" in again.stdout and "ambiguous" not in again.stdout
    assert again.stdout.rindex("pool lab: 4 hosts, 4 free, 0 waiting") > again.stdout.index("deleting shop")
