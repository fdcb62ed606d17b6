"""`muster demo --keep`: prints the console's URL of the demo job and keeps running until Ctrl-C."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from muster.bus.connect import read_credentials_file

# Long since session 25 (docs/testing.md, "Long scenarios"): one more whole `muster demo` for its
# `--keep`; the demo's fast case is tests/e2e/test_demo.py's first, a deployment's console served
# tests/browser's, a running `muster up` ended by Ctrl-C tests/e2e/test_up.py's first.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240),
              pytest.mark.skipif(os.environ.get("MUSTER_LONG_TESTS") != "1", reason="long: MUSTER_LONG_TESTS=1 (make test-long)")]


def test_demo_keep_serves_the_console_until_ctrl_c(tmp_path: Path) -> None:
    # As a user runs it: no server named, no token of the test session (the demo makes its own).
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "MUSTER_TOKEN", "MUSTER_AUTH_SYSTEM_TOKEN")}
    proc = subprocess.Popen([sys.executable, "-m", "muster", "demo", "--keep", "--nodes", "2", "--data-dir", str(tmp_path / "data")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_pump, args=(proc, lines), daemon=True).start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 180
        while not any("kept running" in x for x in seen):
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            assert line, "muster demo --keep exited: " + "".join(seen)
            seen.append(line)
        url = next(x for x in seen if x.startswith("console: ")).split(" ", 1)[1].strip()
        assert "/ui/jobs/" in url
        assert any("sign in with the token in" in x for x in seen)
        # Signed in as the super admin the demo made (the console's session cookie).
        token = read_credentials_file(tmp_path / "data" / "credentials")
        request = urllib.request.Request(url, headers={"Cookie": f"muster_session={token}"})
        with urllib.request.urlopen(request, timeout=10) as page:
            body = page.read().decode()
        assert page.status == 200 and "succeeded" in body
        assert proc.poll() is None, "it must keep running until Ctrl-C"
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(60)
    rest = []
    while (line := lines.get(timeout=10)):
        rest.append(line)
    assert code == 0, "".join(seen + rest)
    assert "everything stopped." in "".join(rest)


def _pump(proc: subprocess.Popen[str], lines: queue.Queue[str]) -> None:
    """Every line the process prints, then "" when it closes its output."""
    assert proc.stdout is not None
    with proc.stdout:  # closed at its end, not left to the garbage collector
        for line in proc.stdout:
            lines.put(line)
    lines.put("")
