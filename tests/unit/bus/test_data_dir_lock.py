"""The data-directory lock of a deployment (issue #18.3)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from muster.bus.server import DataDirBusy, DataDirLock
from muster.cli import main
from muster.cli_support import EXIT_INVALID
from muster.runtime.down import stop_deployment
from muster.runtime.supervisor import RestartPolicy, exit_text


def test_a_second_holder_is_refused_with_the_first_ones_description(tmp_path: Path) -> None:
    first = DataDirLock(tmp_path).acquire()
    first.describe(pid=os.getpid(), nats_url="nats://127.0.0.1:4444", tracker_url="http://127.0.0.1:8080", processes={})
    with pytest.raises(DataDirBusy) as err:
        DataDirLock(tmp_path).acquire()
    said = str(err.value)
    assert f"`muster up` pid {os.getpid()}" in said and "nats://127.0.0.1:4444" in said and "http://127.0.0.1:8080" in said
    assert f"kill -TERM {os.getpid()}" in said and f"`muster down --data-dir {tmp_path}`" in said
    first.release()
    assert not (tmp_path / "deployment.json").exists()
    DataDirLock(tmp_path).acquire().release()


def test_the_lock_lasts_while_a_child_that_inherited_it_lives(tmp_path: Path) -> None:
    """`muster up` killed with -9 leaves its children running on the store: the directory is
    still taken, and the refusal names the children that hold it."""
    lock = DataDirLock(tmp_path).acquire()
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                             pass_fds=(lock.fileno(),))
    try:
        lock.describe(pid=999_999_999, nats_url="nats://127.0.0.1:4444", processes={"nats-server": child.pid})
        fd = lock.fileno()
        lock._fd = None  # as if our process had died: only the child's copy is left
        os.close(fd)
        with pytest.raises(DataDirBusy) as err:
            DataDirLock(tmp_path).acquire()
        assert "pid 999999999 is gone" in str(err.value) and f"nats-server pid {child.pid}" in str(err.value)
    finally:
        child.communicate(b"", timeout=10)
    DataDirLock(tmp_path).acquire().release()


def test_a_holder_that_has_not_described_itself_yet_is_still_refused(tmp_path: Path) -> None:
    first = DataDirLock(tmp_path).acquire()
    with pytest.raises(DataDirBusy, match="has not described itself yet"):
        DataDirLock(tmp_path).acquire()
    first.release()


def test_muster_up_on_a_directory_in_use_is_refused_as_bad_input_exit_2(tmp_path: Path) -> None:
    """The user's choice of directory is refused, nothing failed: exit 2 (docs/client.md), as
    any other refusal of what was given; the message still names who holds it."""
    first = DataDirLock(tmp_path).acquire()
    first.describe(pid=os.getpid(), nats_url="nats://127.0.0.1:4444", tracker_url="http://127.0.0.1:8080", processes={})
    try:
        result = CliRunner(env={"NATS_URL": None}).invoke(main, ["up", "--data-dir", str(tmp_path), "--tracker-port", "0"])
    finally:
        first.release()
    assert result.exit_code == EXIT_INVALID, result.output
    assert "is in use by another muster deployment" in result.output and f"pid {os.getpid()}" in result.output


def test_restart_backoff_doubles_up_to_its_cap() -> None:
    policy = RestartPolicy(backoff_s=0.5, max_backoff_s=4, burst=5, window_s=60)
    assert [policy.delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 4.0, 4.0]


def test_exit_codes_read_as_words() -> None:
    assert exit_text(-9) == "killed by SIGKILL" and exit_text(2) == "exit code 2" and exit_text(None) == "did not start"


def _orphan(lock: DataDirLock, *, ignore_term: bool) -> subprocess.Popen[bytes]:
    """A process `muster up` started and left behind (its command line says muster), holding the lock."""
    code = ("import signal, sys; " + ("signal.signal(signal.SIGTERM, signal.SIG_IGN); " if ignore_term else "")
            + "print('ready', flush=True); sys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", code, "muster"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             pass_fds=(lock.fileno(),))
    assert child.stdout is not None and child.stdout.readline() == b"ready\n"  # its handler is in place
    return child


async def test_muster_down_stops_what_a_killed_muster_up_left_and_nothing_else(tmp_path: Path) -> None:
    assert await stop_deployment(tmp_path, timeout=5) is None  # nothing runs there
    lock = DataDirLock(tmp_path).acquire()
    polite, stubborn = _orphan(lock, ignore_term=False), _orphan(lock, ignore_term=True)
    stranger = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        # The supervisor is gone; a recorded pid now belongs to a process that is not ours.
        lock.describe(pid=999_999_999, processes={"planner": polite.pid, "auth": stubborn.pid, "tracker": stranger.pid})
        fd = lock.fileno()
        lock._fd = None
        os.close(fd)
        assert DataDirLock(tmp_path).in_use()
        stopped = await stop_deployment(tmp_path, timeout=2)
        assert stopped is not None and stopped.supervisor is None
        assert stopped.left == [polite.pid, stubborn.pid] and stopped.killed == [stubborn.pid]
        assert polite.wait(5) == -signal.SIGTERM and stubborn.wait(5) == -signal.SIGKILL
        assert stranger.poll() is None  # not a muster process: never signalled
        assert not DataDirLock(tmp_path).in_use()
    finally:
        for p in (polite, stubborn, stranger):
            p.kill()
            p.wait()
            for pipe in (p.stdin, p.stdout):  # ours to close (ResourceWarning)
                if pipe is not None:
                    pipe.close()
