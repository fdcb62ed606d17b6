"""`muster up` as a user starts it: a real nats-server and four service processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import nats
import nats.errors
import pytest
import pytest_asyncio
from nats.aio.client import Client
from nats.aio.msg import Msg

from contracts.commands import Accepted, CreateCluster
from contracts.events import EVENT_ADAPTER, JobSucceeded
from muster.bus.connect import bearer_headers, connect, read_credentials_file
from muster.bus.wire import close_unconnected
from muster.client import MusterClient
from muster.runtime.autoscale import AutoscalePolicy, DeploymentFleet
from muster.runtime.down import gone
from muster.runtime.supervisor import Deployment
from muster.tls.context import CA_ENV, TlsRefused, http_ssl, served_serial

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
LONG = pytest.mark.skipif(os.environ.get("MUSTER_LONG_TESTS") != "1", reason="long: MUSTER_LONG_TESTS=1 (make test-long)")

DEMO = Path(__file__).parents[2] / "muster" / "demo" / "catalog"


async def _read_until(stream: asyncio.StreamReader, marker: str, seen: dict[str, str]) -> None:
    while True:
        line = (await stream.readline()).decode()
        if not line:
            raise AssertionError(f"muster up exited before {marker!r}; saw {seen}")
        key, _, value = line.partition(":")
        seen[key.strip()] = value.strip()
        if marker in line:
            return


@contextlib.asynccontextmanager
async def _up(tmp_path: Path, *args: str) -> AsyncIterator[tuple[asyncio.subprocess.Process, dict[str, str]]]:
    """`muster up` with the demo catalog and `args`, until it says it is up; Ctrl-C at the end.
    As a user runs it: no server named, no token of the test session (muster up makes its own)."""
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "MUSTER_TOKEN", "MUSTER_AUTH_SYSTEM_TOKEN")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "muster", "up", "--data-dir", str(tmp_path / "data"), "--tracker-port", "0",
        "--catalog", str(DEMO), *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env,
        cwd=tmp_path,
    )
    assert proc.stdout is not None
    seen: dict[str, str] = {}
    try:
        await asyncio.wait_for(_read_until(proc.stdout, "muster is up", seen), 60)
        yield proc, seen
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()


@pytest_asyncio.fixture
async def muster_up(tmp_path: Path) -> AsyncIterator[tuple[asyncio.subprocess.Process, dict[str, str]]]:
    async with _up(tmp_path, "--tenant", "default,acme") as up:
        yield up


def _nats_servers_under(path: Path) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "nats-server" in cmdline and str(path) in cmdline:
                found.append(entry.name)
    return found


async def test_up_runs_a_create_another_shell_finds_it_a_second_up_refuses_and_ctrl_c_leaves_no_orphans(
        muster_up: tuple[asyncio.subprocess.Process, dict[str, str]], tmp_path: Path) -> None:
    """Issue #18.9: `muster up` picks a free NATS port, so the CLI worked only from the same
    directory; and a busy tracker port said only "tracker exited during start". Issue #18.3: a
    second `muster up` in the same data directory used to start a second nats-server on the same
    store (and damage it). Then a create in each tenant, and Ctrl-C. (One `muster up` for all of
    it: each start costs seconds, docs/testing.md.)"""
    proc, seen = muster_up
    await _second_up_refused(proc, seen, tmp_path)
    assert proc.returncode is None, "muster up stopped"
    data = tmp_path / "data"
    assert seen["another shell"] == (f"export MUSTER_DATA_DIR={data.resolve()}  (or NATS_URL={seen['nats']} "
                                     f"MUSTER_TRACKER_URL={seen['tracker']} MUSTER_CREDENTIALS={(data / 'credentials').resolve()})")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code, out = await _muster("provisioners", "list", cwd=elsewhere, MUSTER_DATA_DIR=str(data))
    assert code == 0 and "provisioner " in out, out
    code, out = await _muster("cluster", "list", cwd=elsewhere, NATS_URL=seen["nats"], MUSTER_TRACKER_URL=seen["tracker"],
                              MUSTER_CREDENTIALS=str(data / "credentials"))
    assert code == 0, out

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, out = await _muster("up", "--data-dir", str(tmp_path / "other"), "--tracker-port", str(port), cwd=elsewhere)
        assert code == 2 and f"tracker port {port} on 127.0.0.1 is in use by another program" in out, out
        code, out = await _muster("tracker", "--port", str(port), "--nats-url", seen["nats"], cwd=elsewhere,
                                  MUSTER_CREDENTIALS=str(data / "auth" / "tracker.cred"))
        assert code == 2 and f"cannot listen on 127.0.0.1:{port}: the port is in use" in out, out

    nats_url, tracker = seen["nats"], seen["tracker"]
    assert nats_url.startswith("nats://127.0.0.1:") and tracker.startswith("http://127.0.0.1:")
    assert _nats_servers_under(tmp_path)

    # First start made a super-admin credential only its owner can read; it is what works.
    credentials = tmp_path / "data" / "credentials"
    assert stat.S_IMODE(credentials.stat().st_mode) == 0o600
    token = read_credentials_file(credentials)
    anonymous = Client()
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):  # no anonymous access
        await anonymous.connect(nats_url, allow_reconnect=False, max_reconnect_attempts=0)
    await close_unconnected(anonymous)  # (nats-py leaves a refused connect's socket open)
    async with await MusterClient.connect(nats_url, token=token) as client:
        # `--tenant default,acme`: both have the catalog and the provisioner serves both.
        replies: list[Accepted] = []
        for t in ("default", "acme"):
            sent = await client.send(t, CreateCluster(name="e2e", template="hadoop-small", nodes=3))
            assert isinstance(sent, Accepted) and not sent.warnings, sent
            replies.append(sent)
        ends = await asyncio.gather(*(client.wait(r.job_id, tenant=t, timeout=120) for r, t in zip(replies, ("default", "acme"), strict=True)))
        assert all(isinstance(e, JobSucceeded) for e in ends), ends
        reply = replies[0]

    async with aiohttp.ClientSession() as http:
        async with http.get(f"{tracker}/v1/jobs/{reply.job_id}") as resp:
            assert resp.status == 401 and "needs a token" in (await resp.json())["error"]["message"]
        async with http.get(f"{tracker}/v1/jobs/{reply.job_id}", headers=bearer_headers(token)) as resp:
            body = await resp.json()
    assert resp.status == 200 and body["state"] == "succeeded" and body["layout"]["nodes"] == 3

    proc.send_signal(signal.SIGINT)
    assert await asyncio.wait_for(proc.wait(), 30) == 0
    assert _nats_servers_under(tmp_path) == []


def _state(data: Path) -> dict[str, Any]:
    return json.loads((data / "deployment.json").read_text())


async def _second_up_refused(proc: asyncio.subprocess.Process, seen: dict[str, str], tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    second = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "muster", "up", "--data-dir", str(data), "--tracker-port", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env, cwd=tmp_path,
    )
    out, _ = await asyncio.wait_for(second.communicate(), 60)
    said = out.decode()
    assert second.returncode != 0, said
    assert f"pid {proc.pid}" in said and seen["nats"] in said and "in use" in said, said
    assert (data / "nats.url").read_text() == seen["nats"]
    assert len(_nats_servers_under(tmp_path)) == 1


@LONG
async def test_a_second_up_refuses_and_the_first_survives_kill_9_of_its_children(
        muster_up: tuple[asyncio.subprocess.Process, dict[str, str]], tmp_path: Path) -> None:
    """Issue #18.3 and #18.4: a second `muster up` refused, and a kill -9 of the planner and the
    provisioner mid-job used to stop the whole deployment. Long (about 37 s, most of it the
    killed provisioner's task coming back after its 30 s ack wait): `make test` keeps the
    refusal above; a killed child started again by `muster up`'s supervisor is
    tests/e2e/test_supervisor.py's nats-server case, and jobs finishing across a kill -9 of a
    planner or a provisioner are tests/fault's."""
    proc, seen = muster_up
    data = tmp_path / "data"
    await _second_up_refused(proc, seen, tmp_path)
    before = _state(data)["processes"]
    assert before["planner"] != proc.pid and set(before) >= {"nats-server", "solver", "planner", "provisioner", "tracker"}
    async with await MusterClient.connect(seen["nats"], token=read_credentials_file(data / "credentials")) as client:
        claimed = asyncio.get_running_loop().create_future()

        async def on_task_event(msg: Msg) -> None:
            if msg.headers and msg.headers.get("Muster-Type") == "TaskClaimed" and not claimed.done():
                claimed.set_result(None)

        sub = await client.nc.subscribe("muster.evt.default.task.>", cb=on_task_event)
        reply = await client.send("default", CreateCluster(name="survivor", template="hadoop-small", nodes=3))
        assert isinstance(reply, Accepted)
        await asyncio.wait_for(claimed, 60)
        await sub.unsubscribe()
        for name in ("provisioner", "planner"):  # mid-job
            os.kill(before[name], signal.SIGKILL)
        assert proc.stdout is not None
        notes: dict[str, str] = {}
        await asyncio.wait_for(_read_until(proc.stdout, "provisioner is running again", notes), 30)
        if "planner is running again" not in " ".join(notes):
            await asyncio.wait_for(_read_until(proc.stdout, "planner is running again", notes), 30)
        # The task the dead provisioner held comes back after its ack wait (30 s).
        assert isinstance(await client.wait(reply.job_id, timeout=150), JobSucceeded)

    after = _state(data)["processes"]
    assert after["provisioner"] != before["provisioner"] and after["planner"] != before["planner"]
    # The job's owner is the planner that finished it, not the one killed.
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {read_credentials_file(data / 'credentials')}"}) as http:
        async with http.get(f"{seen['tracker']}/v1/jobs/{reply.job_id}") as resp:
            status = await resp.json()
        async with http.get(f"{seen['tracker']}/v1/jobs/{reply.job_id}/location") as resp:
            location = await resp.json()
    owner = f"planner-{socket.gethostname()}-{after['planner']}"
    assert status["owner"] == owner and location["owner"] == owner, (status["owner"], location["owner"], owner)
    assert {k: after[k] for k in ("nats-server", "solver", "tracker")} == {k: before[k] for k in ("nats-server", "solver", "tracker")}
    assert proc.returncode is None, "muster up stopped"


async def test_a_killed_muster_up_takes_its_children_with_it_and_muster_down_stops_the_next(tmp_path: Path) -> None:
    """A `muster up` killed outright used to leave every child running headless (logs to a
    broken pipe) and holding the data directory, so the next `muster up` there was refused."""
    data = tmp_path / "data"
    async with _up(tmp_path) as (proc, _):
        children = list(_state(data)["processes"].values())
        proc.kill()
        await proc.wait()
        assert await gone(children, timeout=60) == [], "children outlived muster up"
    assert _nats_servers_under(tmp_path) == []
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "MUSTER_TOKEN", "MUSTER_AUTH_SYSTEM_TOKEN")}
    again = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "muster", "up", "--data-dir", str(data), "--tracker-port", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env, cwd=tmp_path,
    )
    try:
        assert again.stdout is not None
        await asyncio.wait_for(_read_until(again.stdout, "muster is up", {}), 60)
        children = list(_state(data)["processes"].values())
        code, said = await _muster("down", "--data-dir", str(data), cwd=tmp_path)
        assert code == 0 and f"stopped muster up (pid {again.pid})" in said, said
        assert await asyncio.wait_for(again.wait(), 5) == 0 and await gone(children, timeout=5) == []
        rest = (await again.stdout.read()).decode()  # asked, not interrupted (it said "interrupted; stopping.")
        assert "stopping (asked by muster down / SIGTERM)." in rest and "interrupted" not in rest, rest
        code, said = await _muster("down", "--data-dir", str(data), cwd=tmp_path)
        assert code == 0 and "nothing to stop" in said, said
    finally:
        if again.returncode is None:
            again.kill()
            await again.wait()


async def _muster(*args: str, cwd: Path, **env: str) -> tuple[int, str]:
    # Not the session's token (tests/conftest.py): `muster up`'s own auth service does not know it.
    environ = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "MUSTER_DATA_DIR", "MUSTER_TOKEN", "MUSTER_CREDENTIALS")} | env
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "muster", *args, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT, env=environ, cwd=cwd)
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


# -- --planners and --autoscale (docs/scaling.md; the autoscaler's timing: tests/unit/scaling) --


class Registrations:
    """Provisioner processes registering and leaving, from the log's live subjects."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.changed = asyncio.Condition()

    async def on_msg(self, msg: Msg) -> None:
        event = EVENT_ADAPTER.validate_json(msg.data)
        who = event.provisioner.id if event.type == "ProvisionerRegistered" else getattr(event, "provisioner_id", "")
        async with self.changed:
            self.seen.append((event.type, who))
            self.changed.notify_all()

    async def expect(self, kind: str, who: str, timeout: float) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(lambda: (kind, who) in self.seen), timeout)


async def test_up_with_two_planners_and_autoscale_shares_the_shards_and_adds_a_provisioner_under_load(tmp_path: Path) -> None:
    async with _up(tmp_path, "--planners", "2", "--capacity", "1", "--autoscale", "--autoscale-max", "3",
                   "--autoscale-cooldown", "1") as (proc, seen):
        assert seen["planners"].startswith("2") and seen["autoscale"].startswith("1..3"), seen
        credentials = tmp_path / "data" / "credentials"
        code, out = await _muster("planners", "--json", cwd=tmp_path, MUSTER_DATA_DIR=str(tmp_path / "data"),
                                  MUSTER_CREDENTIALS=str(credentials))
        assert code == 0, out
        table = json.loads(out)
        assert len(table["planners"]) == 2 and not table["unowned"], table
        assert sorted(len(s) for s in table["planners"].values()) == [table["shards"] // 2] * 2

        registrations = Registrations()
        async with await MusterClient.connect(seen["nats"], token=read_credentials_file(credentials)) as client:
            await client.nc.subscribe("muster.evt.*.provisioner.>", cb=registrations.on_msg)
            # One slot and a 10-node create: the backlog asks for more processes at once.
            reply = await client.send("default", CreateCluster(name="busy", template="hadoop-small", nodes=10))
            assert isinstance(reply, Accepted), reply
            await registrations.expect("ProvisionerRegistered", "provisioner-1", 60)
            assert isinstance(await client.wait(reply.job_id, timeout=180), JobSucceeded)
    assert proc.returncode == 0


async def test_the_fleet_adds_a_supervised_provisioner_and_a_drained_one_leaves_for_good(tmp_path: Path) -> None:
    left = asyncio.Event()
    deployment = Deployment(tmp_path / "deploy", capacity=2, supervise=True,
                            notify=lambda note: left.set() if note.startswith("provisioner-1 has left, as asked") else None)
    registrations = Registrations()
    await deployment.start()
    try:
        async with await MusterClient.connect(deployment.nats_url, token=deployment.admin_token()) as client:
            await client.nc.subscribe("muster.evt.*.provisioner.>", cb=registrations.on_msg)
            fleet = DeploymentFleet(deployment, client.nc, AutoscalePolicy(capacity_each=2), "default")
            assert fleet.count() == 1
            name = await fleet.start_one()
            assert name == "provisioner-1" and fleet.count() == 2
            await registrations.expect("ProvisionerRegistered", name, 60)

            assert await fleet.drain_one() == name  # the newest first
            await registrations.expect("ProvisionerDeregistered", name, 60)
            await asyncio.wait_for(left.wait(), 30)  # the supervisor does not restart it
            assert fleet.count() == 1 and name not in {c.name for c in deployment.children}
            assert "provisioner" in {c.name for c in deployment.children}  # the original stays
    finally:
        await deployment.stop()


# Long since session 25 (docs/testing.md, "Long scenarios"): its kind, `muster up` with TLS whose
# certificates are replaced while it runs, keeps the renewal below as its fast case; a client
# without a certificate refused by mutual TLS is tests/integration/tls/test_nats_tls.py's, and
# every certificate rotated mid-create tests/fault/test_cluster_tls.py's.
@LONG
async def test_up_with_mutual_tls_rotates_its_certificates_mid_create(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #33.3: TLS on every hop, every client presenting a certificate of the local CA, the
    server certificates rotated in the middle of a create."""
    monkeypatch.delenv(CA_ENV, raising=False)
    async with _up(tmp_path, "--mtls") as (proc, seen):
        assert proc.stdout is not None
        nats_url, tracker = seen["nats"], seen["tracker"]
        assert nats_url.startswith("tls://127.0.0.1:") and tracker.startswith("https://127.0.0.1:")
        data = tmp_path / "data"
        files = [p for p in (data / "tls").rglob("*") if p.is_file()]
        assert {"ca.pem", "ca.key", "nats.pem", "tracker.key", "client.pem", "planner.pem", "provisioner.key"} <= {p.name for p in files}
        assert {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o600}

        # The CLI verifies and presents the local user's certificate (found in the data dir).
        code, out = await _muster("whoami", cwd=tmp_path, MUSTER_DATA_DIR=str(data))
        assert code == 0 and "super admin" in out, out
        # A client that trusts the CA but has no certificate of its own is refused.
        monkeypatch.setenv(CA_ENV, str(data / "tls" / "ca.pem"))
        monkeypatch.chdir(tmp_path / "data")  # no ./.muster/tls/client.pem here
        with pytest.raises(TlsRefused, match="(?i)certificate"):
            await asyncio.wait_for(connect(nats_url, name="no-client-cert", token=read_credentials_file(data / "credentials")), 30)
        monkeypatch.delenv(CA_ENV)

        context = http_ssl(data)
        before = (await served_serial(nats_url, context), await served_serial(tracker, context))
        token = read_credentials_file(data / "credentials")
        async with await MusterClient.connect(nats_url, token=token, data_dir=data) as client:
            completed = asyncio.get_running_loop().create_future()

            async def on_task_event(msg: Msg) -> None:
                if msg.headers and msg.headers.get("Muster-Type") == "TaskSucceeded" and not completed.done():
                    completed.set_result(None)

            sub = await client.nc.subscribe("muster.evt.default.task.>", cb=on_task_event)
            reply = await client.send("default", CreateCluster(name="rotated", template="hadoop-small", nodes=3))
            assert isinstance(reply, Accepted)
            await asyncio.wait_for(completed, 60)  # mid-create: a task done, most still to come
            await sub.unsubscribe()
            code, out = await _muster("tls", "rotate", cwd=tmp_path, MUSTER_DATA_DIR=str(data))
            assert code == 0 and f"pid {proc.pid}" in out, out
            await asyncio.wait_for(_read_until(proc.stdout, "certificates rotated", seen), 60)
            said = seen["certificates rotated"]
            assert "nats-server" in said and "tracker" in said, said
            assert isinstance(await client.wait(reply.job_id, timeout=120), JobSucceeded)
        after = (await served_serial(nats_url, context), await served_serial(tracker, context))
        assert after[0] != before[0] and after[1] != before[1]

        async with aiohttp.ClientSession() as http:
            async with http.get(f"{tracker}/v1/jobs/{reply.job_id}", headers=bearer_headers(token), ssl=context) as resp:
                body = await resp.json()
        assert resp.status == 200 and body["state"] == "succeeded"
    assert proc.returncode == 0


async def test_up_with_tls_renews_its_server_certificates_before_they_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Server certificates last 90 days and a start renews those within 30 days of their end: a
    deployment that runs on renews them itself when they get there (here: seconds after its
    start), and clients go on trusting the same CA."""
    from muster.runtime.tls import server_names
    from muster.tls.ca import RENEW_BEFORE_DAYS, LocalCA, serial_of

    monkeypatch.delenv(CA_ENV, raising=False)
    folder = tmp_path / "data" / "tls"
    ca = LocalCA.load_or_create(folder)
    soon = RENEW_BEFORE_DAYS + 20 / 86400  # fresh enough for a start to keep, due 20 s later
    made = {name: serial_of(ca.issue(folder / "servers" / name, f"muster {name}", server_names("127.0.0.1"), days=soon).cert
                            .read_bytes()) for name in ("nats", "tracker")}
    async with _up(tmp_path, "--tls") as (proc, seen):
        assert proc.stdout is not None
        context = http_ssl(tmp_path / "data")
        assert await served_serial(seen["nats"], context) == made["nats"]  # kept at the start
        await asyncio.wait_for(_read_until(proc.stdout, "certificates renewed before their end", seen), 90)
        assert "nats-server" in seen["certificates renewed before their end"]
        assert await served_serial(seen["nats"], context) != made["nats"]
        assert await served_serial(seen["tracker"], context) != made["tracker"]
        code, out = await _muster("whoami", cwd=tmp_path, MUSTER_DATA_DIR=str(tmp_path / "data"))
        assert code == 0 and "super admin" in out, out
    assert proc.returncode == 0


async def _reload_reads_the_webhook_files_added_while_up_runs(proc: asyncio.subprocess.Process, seen: dict[str, str],
                                                               tmp_path: Path) -> None:
    """Walk of session 24: a webhook's signing secret, or a receiver inside the deployment,
    needed `muster up` stopped and started again with $MUSTER_NOTIFIER_SECRETS and
    `--webhook-allow`. Now its notifier's files are in the data directory, and `muster reload`
    has the running notifier read them again; a file it cannot read keeps what it had. Session
    25: the pool service and the planners read the allow file again too (a pool callback's
    receiver), as they did only at start."""
    assert proc.stdout is not None
    data = tmp_path / "data"
    env = {"MUSTER_DATA_DIR": str(data)}

    async def reload() -> dict[str, str]:
        code, out = await _muster("reload", cwd=tmp_path, **env)
        assert code == 0 and f"pid {proc.pid}" in out, out
        await asyncio.wait_for(_read_until(proc.stdout, "reload:", seen), 60)  # type: ignore[arg-type]
        return dict(one.partition(": ")[::2] for one in seen["reload"].split("; "))

    def add(name: str) -> tuple[str, ...]:
        return ("notify", "add", name, "--on", "job_failed", "--webhook", "http://127.0.0.1:9/hook", "--secret", "secret://ops-hook")

    create = ("cluster", "create", "c1", "-t", "hadoop-small", "-n", "2", "--callback", "http://127.0.0.1:9/hook")
    code, out = await _muster(*add("ops"), cwd=tmp_path, **env)
    assert code == 2 and "secret 'ops-hook' is not in the notifier's secrets file" in out and "loopback" in out, out
    code, out = await _muster(*create, cwd=tmp_path, **env)
    assert code == 2 and "--callback: 127.0.0.1 is a loopback address" in out and "`muster reload`" in out, out
    secrets, allow = data / "notifier-secrets.json", data / "webhook-allow"
    assert {stat.S_IMODE(p.stat().st_mode) for p in (secrets, allow)} == {0o600}
    value = f"hook-secret-{os.getpid()}-{id(proc)}"
    secrets.write_text(json.dumps({"@secrets": {"ops-hook": value}}))
    allow.write_text(allow.read_text() + "127.0.0.1:9  # the receiver of the test\n")
    assert await reload() == {"notifier": "reloaded", "planner": "reloaded", "pool": "reloaded"}
    code, out = await _muster(*add("ops"), cwd=tmp_path, **env)
    assert code == 0 and "ops" in out, out
    code, out = await _muster(*create, cwd=tmp_path, **env)
    # The pool service takes the receiver now: what is left is the demo's provider, no pool's.
    assert code == 2 and "loopback" not in out and "provider 'sim' takes no hosts from a pool" in out, out
    # A file it cannot read: kept what it had, and said why (the file, not its values).
    secrets.write_text('{"@secrets": {"ops-hook": ')
    said = await reload()
    assert said["notifier"].startswith("not reloaded: cannot read secrets file") and str(secrets) in said["notifier"], said
    assert said["pool"] == "reloaded"  # (its allow file is fine)
    code, out = await _muster(*add("ops-2"), cwd=tmp_path, **env)
    assert code == 0, out
    logs = "".join(p.read_text(errors="replace") for p in (data / "logs").iterdir() if p.is_file())
    assert value not in logs and "notifier reloaded" in logs and "pool reloaded" in logs
    secrets.write_text(json.dumps({"@secrets": {"ops-hook": value}}))  # whole again: a notifier refuses to start on it


async def test_muster_ps_counts_a_restart_muster_reload_reads_webhook_files_and_a_backup_restored_elsewhere_has_its_clusters(
        tmp_path: Path) -> None:
    """No command listed a deployment's processes (an earlier session's walk): `muster ps` reads
    what the running `muster up` says of itself and checks each PID on the machine. Then, in the
    same deployment (each start of one costs seconds, docs/testing.md), `muster reload`
    (`_reload_reads_the_webhook_files_added_while_up_runs`) and a backup of it, stopped, restored
    elsewhere (`_a_backup_restored_elsewhere_has_its_clusters`)."""
    data = tmp_path / "data"
    async with _up(tmp_path) as (proc, seen):
        code, said = await _muster("ps", "--json", "--data-dir", str(data), cwd=tmp_path)
        assert code == 0, said
        listed = {p["name"]: p for p in json.loads(said)["processes"]}
        assert set(listed) >= {"muster up", "nats-server", "auth", "solver", "planner", "provisioner", "tracker"}, listed
        assert listed["muster up"]["pid"] == proc.pid and all(p["state"] == "alive" and p["restarts"] == 0 for p in listed.values())
        assert all(Path(p["log"]).is_file() for name, p in listed.items() if name != "muster up"), listed
        assert listed["nats-server"]["log"] == str(data.resolve() / "nats" / "nats-server.log")
        old = listed["solver"]["pid"]
        os.kill(old, signal.SIGKILL)
        assert proc.stdout is not None
        await asyncio.wait_for(_read_until(proc.stdout, "solver is running again", {}), 60)
        code, said = await _muster("ps", "--json", "--data-dir", str(data), cwd=tmp_path)
        solver = {p["name"]: p for p in json.loads(said)["processes"]}["solver"]
        assert code == 0 and solver["pid"] != old and (solver["state"], solver["restarts"]) == ("alive", 1), solver
        code, said = await _muster("ps", "--data-dir", str(data), cwd=tmp_path)
        row = next(line.split() for line in said.splitlines() if line.startswith("solver "))
        assert code == 0 and row == ["solver", str(solver["pid"]), "alive", "1", str(data.resolve() / "logs" / "solver.log")], said
        await _reload_reads_the_webhook_files_added_while_up_runs(proc, seen, tmp_path)
        await _a_backup_restored_elsewhere_has_its_clusters(proc, seen, tmp_path)
    assert _nats_servers_under(tmp_path) == []


async def _a_backup_restored_elsewhere_has_its_clusters(proc: asyncio.subprocess.Process, seen: dict[str, str],
                                                      tmp_path: Path) -> None:
    """docs/runtime.md, "Backing up and restoring": stop, `cp -a` the data directory, start on the
    copy elsewhere. The copy has the clusters, the credentials that open them, and its services
    (the provisioner's identity and plugin state among them) run the next job."""
    data, other = tmp_path / "data", tmp_path / "elsewhere"
    async with await MusterClient.connect(seen["nats"], token=read_credentials_file(data / "credentials")) as client:
        sent = await client.send("default", CreateCluster(name="kept", template="hadoop-small", nodes=2))
        assert isinstance(sent, Accepted), sent
        assert isinstance(await client.wait(sent.job_id, tenant="default", timeout=120), JobSucceeded)
    code, said = await _muster("down", "--data-dir", str(data), cwd=tmp_path)
    assert code == 0 and await asyncio.wait_for(proc.wait(), 30) == 0, said
    code, said = await _muster("ps", "--data-dir", str(data), cwd=tmp_path)
    assert code != 0 and f"no muster deployment runs in {data}" in said, said
    other.mkdir()
    copied = await asyncio.create_subprocess_exec("cp", "-a", str(data), str(other / "data"))
    assert await copied.wait() == 0
    async with _up(other):
        code, said = await _muster("cluster", "list", "--json", "--data-dir", str(other / "data"), cwd=other)
        assert code == 0 and [(c["name"], c["status"], c["nodes"]) for c in json.loads(said)] == [("kept", "active", 2)], said
        code, said = await _muster("cluster", "expand", "kept", "--add", "1", "--wait", "--data-dir", str(other / "data"), cwd=other)
        assert code == 0 and "succeeded" in said, said
    assert _nats_servers_under(other) == []
