"""The time a process has to say it started is the deployment's (`start_timeout_s`, 60 s by
default; it was 30 s, which a tracker outlasted as `muster up` and `muster demo` started on a
loaded 2-core machine; the fault tests give 90 s: docs/testing.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from muster.runtime.supervisor import Deployment, StartError


async def test_a_process_that_never_says_it_started_fails_after_the_deployments_start_timeout(tmp_path: Path) -> None:
    deployment = Deployment(tmp_path, nats_url="nats://127.0.0.1:1", start_timeout_s=0.5,
                            launcher=lambda name: ["sh", "-c", "exec sleep 30", "never-says-started"])
    assert Deployment(tmp_path / "other").start_timeout_s == 60.0
    deployment.lock.acquire()
    (tmp_path / "logs").mkdir()
    try:
        with pytest.raises(StartError, match=r"^planner did not start within 0.5s; see "):
            await deployment._spawn("planner", ["planner"])
    finally:
        await deployment.stop()
    assert not deployment.children
