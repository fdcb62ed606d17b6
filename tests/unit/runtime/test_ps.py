"""`muster ps` (muster/runtime/ps.py): each process `muster up` describes, checked against the
machine; those given up on with why; where each logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from click.testing import CliRunner

from muster.bus.server import DataDirLock
from muster.cli import main
from muster.runtime.ps import alive, processes
from muster.runtime.supervisor import Child, Deployment

STATE = {"pid": 100, "nats_url": "nats://127.0.0.1:1", "tracker_url": "http://127.0.0.1:2", "started_at": "2026-12-01T04:00:00+00:00",
         "processes": {"nats-server": 101, "solver": 102, "planner": 103},
         "given_up": {"notifier": "notifier exited 5 times within 60 s (last: exit code 1); giving up on it"},
         "restarts": {"solver": 2, "notifier": 4}, "logs": {"nats-server": "/d/nats/nats-server.log", "solver": "/d/logs/solver.log",
                                                            "planner": "/d/logs/planner.log", "notifier": "/d/logs/notifier.log"}}


def test_each_process_is_listed_with_its_state_restarts_and_log_and_one_given_up_says_why() -> None:
    found = processes(STATE, Path("/d"), is_alive=lambda pid, name: pid != 103)
    assert [(p.name, p.pid, p.state, p.restarts, p.log) for p in found] == [
        ("muster up", 100, "alive", 0, None), ("nats-server", 101, "alive", 0, "/d/nats/nats-server.log"),
        ("solver", 102, "alive", 2, "/d/logs/solver.log"), ("planner", 103, "gone", 0, "/d/logs/planner.log"),
        ("notifier", None, "given up", 4, "/d/logs/notifier.log")]
    assert found[-1].given_up is not None and "giving up on it" in found[-1].given_up


def test_a_deployment_of_an_earlier_version_names_no_logs_and_they_are_where_muster_up_writes_them() -> None:
    old = {k: v for k, v in STATE.items() if k not in ("logs", "restarts")}
    logs = {p.name: p.log for p in processes(old, Path("/d"), is_alive=lambda pid, name: True)}
    assert logs == {"muster up": None, "nats-server": "/d/nats/nats-server.log", "solver": "/d/logs/solver.log",
                    "planner": "/d/logs/planner.log", "notifier": "/d/logs/notifier.log"}


def test_a_pid_taken_by_another_program_is_not_alive() -> None:
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert not alive(other.pid, "solver") and not alive(other.pid, "nats-server")  # runs, but is not ours
    finally:
        other.kill()
        other.wait()
    assert not alive(other.pid, "solver")  # reaped: no such process


def test_the_command_reads_the_running_deployment_and_refuses_where_none_runs(tmp_path: Path) -> None:
    said = CliRunner().invoke(main, ["ps", "--data-dir", str(tmp_path)])
    assert said.exit_code == 2 and f"no muster deployment runs in {tmp_path}: `muster up --data-dir {tmp_path}` starts one" in said.output
    lock = DataDirLock(tmp_path).acquire()
    try:
        lock.describe(**(STATE | {"pid": os.getpid()}))
        said = CliRunner().invoke(main, ["ps", "--data-dir", str(tmp_path), "--json"])
        assert said.exit_code == 0, said.output
        shown = json.loads(said.output)
        assert [(p["name"], p["state"]) for p in shown["processes"]][1:] == [
            ("nats-server", "gone"), ("solver", "gone"), ("planner", "gone"), ("notifier", "given up")]
        said = CliRunner().invoke(main, ["ps", "--data-dir", str(tmp_path)])
        assert said.exit_code == 0 and "notifier given up: notifier exited 5 times" in said.output, said.output
        words = " ".join(said.output.split())  # (this process is not one of muster's: its PID reads as gone)
        assert f"`muster up` (pid {os.getpid()}) is gone" in words and f"`muster down --data-dir {tmp_path}` stops them" in words
        assert "not running: nats-server, solver, planner (`muster up` starts each again" in words, words
    finally:
        lock.release()


def test_the_logs_muster_up_names_are_found_from_any_directory(tmp_path: Path, monkeypatch: Any) -> None:
    """README's `muster up` runs on `.muster`, relative: deployment.json said `.muster/logs/solver.log`,
    and `muster ps` in another shell (`MUSTER_DATA_DIR=/home/me/work/.muster`) named a file
    that is not there from where it runs."""
    monkeypatch.chdir(tmp_path)
    deployment = Deployment(data_dir=Path(".muster"))
    Path(".muster").mkdir()
    deployment.lock.acquire()
    try:
        deployment.children.append(Child("solver", SimpleNamespace(pid=os.getpid()), Path(".muster/logs/solver.log")))  # type: ignore[arg-type]
        deployment._describe()
        monkeypatch.chdir("/")
        said = CliRunner().invoke(main, ["ps", "--data-dir", str(tmp_path / ".muster"), "--json"])
        assert said.exit_code == 0, said.output
        logs = {p["name"]: p["log"] for p in json.loads(said.output)["processes"]}
        assert logs["solver"] == str(tmp_path.resolve() / ".muster" / "logs" / "solver.log"), logs
    finally:
        deployment.lock.release()


def test_a_service_that_does_not_answer_at_the_running_deployment_s_url_is_said_restarting_silent_or_given_up(tmp_path: Path) -> None:
    """Walk of session 37: the tracker killed (`muster up` restarting it) or nats-server stopped,
    the commands asked "is `muster up` running?" (it was) and, of a silent plain server, whether it
    needed a tls:// URL. Said now from what the running `muster up` says of itself."""
    from muster.runtime.ps import unanswered

    lock = DataDirLock(tmp_path).acquire()
    try:
        lock.describe(**{**STATE, "processes": {"nats-server": 101, "tracker": 104},
                         "logs": {"nats-server": "/d/nats/nats-server.log", "tracker": f"{tmp_path.resolve()}/logs/tracker.log"}})
        gone = unanswered(tmp_path, "tracker", "http://127.0.0.1:2/", is_alive=lambda pid, name: pid != 104)
        assert gone == (f"`muster up` (pid 100) runs on {tmp_path} and starts its tracker again (it exited; restarted 0 times so "
                        f"far): try again in a moment; `muster ps` shows it, {tmp_path.resolve()}/logs/tracker.log says why it "
                        "stopped"), gone
        silent = unanswered(tmp_path, "nats-server", "nats://127.0.0.1:1", is_alive=lambda pid, name: True)
        assert silent is not None and "its nats-server (pid 101) is alive but did not answer" in silent and "/d/nats/nats-server.log" in silent
        assert "tls://" not in silent
        assert unanswered(tmp_path, "notifier", "", is_alive=lambda pid, name: True) is None  # (no URL of its own)
        lock.describe(**{**STATE, "processes": {}, "given_up": {"tracker": "tracker exited 5 times within 60 s; giving up on it"}})
        given_up = unanswered(tmp_path, "tracker", "http://127.0.0.1:2", is_alive=lambda pid, name: True)
        assert given_up is not None and "and gave up on its tracker: tracker exited 5 times within 60 s" in given_up, given_up
        assert unanswered(tmp_path, "tracker", "http://127.0.0.1:9", is_alive=lambda pid, name: True) is None  # another deployment's
        assert unanswered(tmp_path, "tracker", "http://127.0.0.1:2", is_alive=lambda pid, name: pid != 100) is None  # muster up gone
    finally:
        lock.release()
    assert unanswered(tmp_path, "tracker", "http://127.0.0.1:2", is_alive=lambda pid, name: True) is None  # nothing holds it


def test_a_command_that_cannot_reach_the_deployment_s_nats_says_muster_up_is_starting_it_again(tmp_path: Path) -> None:
    import asyncio
    import socket

    import pytest

    from muster.cli_bus import connect_or_fail
    from muster.cli_support import CliError

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        url = f"nats://127.0.0.1:{free.getsockname()[1]}"
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "muster"])  # `muster up`, alive
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()  # a nats-server that exited
    lock = DataDirLock(tmp_path).acquire()
    try:
        lock.describe(pid=stand_in.pid, nats_url=url, processes={"nats-server": ended.pid}, restarts={"nats-server": 2})
        with pytest.raises(CliError) as err:
            asyncio.run(connect_or_fail(url, tmp_path))
        said = str(err.value)
        assert said.startswith(f"cannot reach NATS at {url} (nothing listens there: connection refused): `muster up` (pid "
                               f"{stand_in.pid}) runs on {tmp_path} and starts its nats-server again (it exited; restarted 2 times "
                               "so far): try again in a moment"), said
        assert "is `muster up` running" not in said
    finally:
        lock.release()
        stand_in.kill()
        stand_in.wait()
