"""The embedded deployment as a process manager (issue #18.4): a child that keeps crashing is
given up on with a clear message while the others keep running; a killed nats-server comes
back on the same port and store, a killed tracker on the port it got."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio

from contracts.commands import Accepted, CreateCluster
from contracts.events import JobSucceeded
from muster.bus.eventstore import EventStore
from muster.catalog.files import load_catalog
from muster.catalog.store import apply_catalog
from muster.client import MusterClient
from muster.runtime.exits import STAY_DOWN_EXIT
from muster.runtime.supervisor import SERVER, Deployment, RestartPolicy
from services.provisioner.presence import live_provisioners

from .test_up import DEMO

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
LONG = pytest.mark.skipif(os.environ.get("MUSTER_LONG_TESTS") != "1", reason="long: MUSTER_LONG_TESTS=1 (make test-long)")


class Notes:
    """The supervisor's sentences, waited on as they come."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.changed = asyncio.Condition()

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        asyncio.get_running_loop().create_task(self._wake())

    async def _wake(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def wait_for(self, text: str, timeout: float = 60.0) -> str:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(lambda: any(text in line for line in self.lines)), timeout)
        return next(line for line in self.lines if text in line)


@pytest_asyncio.fixture
async def supervised(tmp_path: Path) -> AsyncIterator[tuple[Deployment, Notes]]:
    notes = Notes()
    deployment = Deployment(tmp_path / "data", supervise=True, notify=notes,
                            policy=RestartPolicy(backoff_s=0.05, max_backoff_s=0.2, burst=3, window_s=60))
    await deployment.start()
    try:
        yield deployment, notes
    finally:
        await deployment.stop()


async def test_a_child_that_keeps_crashing_is_given_up_on_and_the_others_run_on(supervised: tuple[Deployment, Notes]) -> None:
    deployment, notes = supervised
    others = {c.name: c.pid for c in deployment.children if c.name != "solver"}
    solver = deployment.child("solver")
    solver.args = ["solver", "--no-such-option"]  # every start from now on fails at once
    os.kill(solver.pid, signal.SIGKILL)

    first = await notes.wait_for("solver exited (killed by SIGKILL); restarting it in 0.05 s")
    given_up = await notes.wait_for("giving up on it")
    assert given_up.startswith("solver exited 3 times within 60 s (last: exit code 2)"), notes.lines
    assert "the others keep running" in given_up and str(deployment.data_dir / "logs" / "solver.log") in given_up
    assert "solver failed to start again" in " ".join(notes.lines) and first in notes.lines
    assert "no such option" in (deployment.data_dir / "logs" / "solver.log").read_text().lower()
    assert deployment.given_up == {"solver": given_up}
    still = {c.name: c.pid for c in deployment.children if c.process.returncode is None}
    assert still == others
    await asyncio.wait_for(deployment.steady(), 10)  # nothing else to wait for: the solver is given up on


async def test_a_killed_nats_server_comes_back_and_the_services_carry_on_and_a_killed_tracker_on_its_port(
        supervised: tuple[Deployment, Notes]) -> None:
    """Then the tracker, killed: no --tracker-port, so it was given 0 and said which port it bound;
    started again, it is given that port, where `tracker.url` and the clients know to find it.
    (One deployment for both: each start of one costs seconds of CPU, docs/testing.md.)"""
    deployment, notes = supervised
    assert deployment.server is not None and deployment.server.process is not None
    url, pids = deployment.nats_url, {c.name: c.pid for c in deployment.children}
    os.kill(deployment.server.process.pid, signal.SIGKILL)
    await notes.wait_for(f"{SERVER} is running again")
    assert deployment.nats_url == url and {c.name: c.pid for c in deployment.children} == pids

    async with await MusterClient.connect(url) as client:
        await apply_catalog(EventStore(client.nc), "default", load_catalog(DEMO), by="test")
        # `request` sends again while no planner listens: they reconnect within a second or so.
        reply = await client.request(CreateCluster(name="after", template="hadoop-small", nodes=2), tenant="default")
        assert isinstance(reply, Accepted), reply
        assert isinstance(await client.wait(reply.job_id, timeout=120), JobSucceeded)

    url = deployment.tracker_url
    assert deployment.tracker_port and (deployment.data_dir / "tracker.url").read_text() == url
    os.kill(deployment.child("tracker").pid, signal.SIGKILL)
    await notes.wait_for("tracker is running again")
    assert deployment.tracker_url == url and deployment.child("tracker").port == deployment.tracker_port
    async with aiohttp.ClientSession() as http, http.get(f"{url}/healthz") as resp:
        assert resp.status == 200


async def test_a_service_waiting_for_nats_stops_on_sigterm(closed_port: int) -> None:
    """A service connects without end (reconnects never give up); a stop must not wait for
    NATS. Found while killing nats-server under `muster up`: children hung on SIGTERM."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "muster", "solver", "--nats-url", f"nats://127.0.0.1:{closed_port}",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    try:
        async with asyncio.timeout(30):  # until it says it cannot reach NATS
            line = b"start"
            while line and b"nats error" not in line:
                line = await proc.stderr.readline()
            assert line, "the service exited instead of waiting for NATS"
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


# Long since session 25 (docs/testing.md, "Long scenarios"): a provisioner added to a supervised
# deployment and one retired leaving without a restart is also tests/e2e/test_up.py's
# test_the_fleet_adds_a_supervised_provisioner_and_a_drained_one_leaves_for_good, its fast case;
# a killed child started again, this file's killed nats-server.
@LONG
async def test_a_child_added_runs_supervised_and_a_retired_one_leaves_without_a_restart(
        supervised: tuple[Deployment, Notes]) -> None:
    """For an autoscaler: one more provisioner, then one fewer (it drains and exits itself)."""
    deployment, notes = supervised
    args = [*deployment.commands()["provisioner"][:5], "--id", "provisioner-2", "--work-dir", str(deployment.data_dir / "provisioner-2")]
    added = await deployment.add("provisioner-2", args)
    state = json.loads((deployment.data_dir / "deployment.json").read_text())
    assert state["processes"]["provisioner-2"] == added.pid

    os.kill(added.pid, signal.SIGKILL)  # supervised like the others
    await notes.wait_for("provisioner-2 exited")
    await deployment.steady()  # until its restart is done
    assert any("provisioner-2 is running again" in line for line in notes.lines), notes.lines
    again = deployment.child("provisioner-2")
    assert again.pid != added.pid and again.started.is_set()

    deployment.retire("provisioner-2")
    os.kill(again.pid, signal.SIGTERM)  # as a drained provisioner ends itself
    assert await asyncio.wait_for(again.process.wait(), 30) == 0
    assert await notes.wait_for("provisioner-2 has left") == "provisioner-2 has left, as asked (exit code 0)"
    assert "provisioner-2" not in {c.name for c in deployment.children}
    assert "provisioner-2" not in json.loads((deployment.data_dir / "deployment.json").read_text())["processes"]
    assert not [line for line in notes.lines if "provisioner-2 exited" in line and "SIGKILL" not in line]


async def test_a_provisioner_whose_id_another_process_took_over_exits_and_stays_down(
        supervised: tuple[Deployment, Notes]) -> None:
    """Decision 54: the replaced process renews its presence no more and would give every task
    back while it looks alive; it exits instead, with a status the supervisor does not restart
    on (started again, it would take the id back, and the two would do so for ever)."""
    deployment, notes = supervised
    first = deployment.child("provisioner")
    args = [*deployment.commands()["provisioner"][:5], "--id", "provisioner", "--work-dir", str(deployment.data_dir / "again")]
    second = await deployment.add("provisioner-2", args)  # (its credentials: the first's, under auth)

    assert await asyncio.wait_for(first.process.wait(), 60) == STAY_DOWN_EXIT
    said = await notes.wait_for("provisioner exited")
    assert said.startswith(f"provisioner exited (exit code {STAY_DOWN_EXIT}: it must not be started again); leaving it down")
    assert deployment.given_up == {"provisioner": said}
    log = (deployment.data_dir / "logs" / "provisioner.log").read_text()
    assert "another process took provisioner id provisioner over; exiting" in log
    await deployment.steady()
    assert not [line for line in notes.lines if "restarting" in line or "running again" in line], notes.lines
    assert second.process.returncode is None

    async with await MusterClient.connect(deployment.nats_url) as client:
        [record] = await live_provisioners(client.nc)
    assert record.info.pid == second.pid  # its record stays: the first never deleted it


async def test_a_notifier_given_up_on_for_its_secrets_file_starts_again_on_reload_once_it_is_fixed(
        supervised: tuple[Deployment, Notes]) -> None:
    """Walked by hand (session 26): a notifier killed while its secrets file had a typo failed
    every restart and was given up on; `deployment.json` still named its dead pid, and after the
    file was fixed `muster reload` did not mention it: only a whole new `muster up` brought it back."""
    deployment, notes = supervised
    secrets = deployment.data_dir / "notifier-secrets.json"
    secrets.write_text('{"@secrets": ')
    notifier = deployment.child("notifier")
    notifier.args = [*notifier.args, "--secrets", str(secrets)]
    os.kill(notifier.pid, signal.SIGKILL)
    given_up = await notes.wait_for("notifier exited 3 times")
    assert "cannot read secrets file" in " ".join(notes.lines), notes.lines
    state = json.loads((deployment.data_dir / "deployment.json").read_text())
    assert "notifier" not in state["processes"] and state["given_up"] == {"notifier": given_up}, state

    said = dict(one.split(": ", 1) for one in await deployment.reload_settings())
    assert said["notifier"].startswith("not started again: notifier exited during start: cannot read secrets file"), said
    assert said["planner"] == "reloaded" and "notifier" in deployment.given_up

    secrets.write_text("{}\n")
    said = dict(one.split(": ", 1) for one in await deployment.reload_settings())
    again = deployment.child("notifier")
    assert said["notifier"] == f"started again (pid {again.pid})" and again.started.is_set(), said
    state = json.loads((deployment.data_dir / "deployment.json").read_text())
    assert state["processes"]["notifier"] == again.pid and "notifier" not in state["given_up"], state
    assert deployment.given_up == {}
    os.kill(again.pid, signal.SIGKILL)  # supervised again (every restart before this one failed)
    await notes.wait_for("notifier is running again")
