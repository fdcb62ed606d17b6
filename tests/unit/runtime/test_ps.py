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
