"""Real clusters end to end (#29.5): `muster up`'s processes, namespace nodes with their own sshd,
a NATS cluster from examples/catalog-real that the servers themselves report as formed.

The fast cases (default run): one node, created, checked from the live process, deleted, nothing
left; on the way, expanded to two (the first node's config stale, repaired), its sshd killed and
the node reconnected by a repair; and `muster demo --real` interrupted in its expand, nothing left. The long one (`make test-long`): 3
nodes -> 5 (the old ones stale, reconfigured with the new peers, one at a time) -> a configure that
fails rolls back -> a killed server is drift -> repair -> shrink (the rest stale, repaired) ->
delete, nothing left."""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio

from contracts.catalog import Action
from contracts.commands import (
    CheckCluster,
    ConfigureCluster,
    CreateCluster,
    DeleteCluster,
    ExpandCluster,
    RemoveServices,
    RepairCluster,
    RestartServices,
    Rolling,
    ShrinkCluster,
    StartServices,
    StopServices,
)
from contracts.events import TaskAttemptFailed, TaskCompleted, TaskQueued
from muster.bus.eventstore import EventStore
from muster.catalog.store import apply_catalog
from muster.client import MusterClient
from muster.runtime.real_demo import REAL_CATALOG, kill_member, members_by_node, real_catalog
from muster.runtime.supervisor import Deployment
from services.planner.domain.job import UNRUN
from services.provisioner.plugins.builtin.namespaces import system

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
TENANT = "real"
LONG = pytest.mark.skipif(os.environ.get("MUSTER_LONG_TESTS") != "1", reason="long: MUSTER_LONG_TESTS=1 (make test-long)")


@dataclass
class Real:
    client: MusterClient
    prefix: str
    nodes_dir: Path
    deployment: Deployment
    job: str = ""
    """The job `run` ran last."""

    async def page(self, path: str) -> str:
        """A console page, as a signed-in person of the tenant gets it."""
        headers = {"Authorization": f"Bearer {self.deployment.admin_token()}", "X-Muster-Tenant": TENANT}
        async with aiohttp.ClientSession() as http, http.get(self.deployment.tracker_url + path, headers=headers) as resp:
            assert resp.status == 200, (path, resp.status)
            return await resp.text()

    async def run(self, command: object, ok: bool = True) -> str:
        outcome = await self.client.run(command, tenant=TENANT, timeout=600)  # type: ignore[arg-type]
        assert outcome.succeeded is ok, (outcome.final.type, outcome.reason)
        self.job = outcome.reply.job_id
        return outcome.reply.cluster_id

    async def failed_attempts(self) -> list[str]:
        """The last job's attempts that failed (not a segment's step ended unrun), each its task and error."""
        return [f"{r.event.task_id}: {r.event.error}" async for r in self.client.events(self.job, tenant=TENANT)
                if isinstance(r.event, TaskAttemptFailed) and r.event.error not in UNRUN]

    def left(self) -> list[str]:
        """What of this run's prefix still exists: namespaces, interfaces, node directories, mounts."""
        found = [f"netns {p.name}" for p in Path("/run/netns").glob(f"{self.prefix}-*")]
        found += [f"link {p.name}" for p in Path("/sys/class/net").glob(f"{self.prefix}-*")]
        found += [f"dir {p}" for p in self.nodes_dir.glob(f"{self.prefix}-*")]
        for table in Path("/proc").glob("[0-9]*/mountinfo"):
            try:
                found += [f"mount {line.split()[4]}" for line in table.read_text().splitlines() if str(self.nodes_dir) in line]
            except OSError:
                continue
        return found


@pytest_asyncio.fixture
async def real(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Real]:
    refusal = system.root_refusal()
    if refusal:
        pytest.skip(refusal)
    if not Path("/usr/sbin/sshd").exists():
        pytest.skip("/usr/sbin/sshd not found: install Debian's openssh-server")
    monkeypatch.setenv("MUSTER_PLAYBOOK_PATH", str(REAL_CATALOG / "ansible"))
    for name in ("NATS_URL", "MUSTER_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    prefix = "e" + os.urandom(2).hex()
    nodes_dir = tmp_path / "nodes"
    deployment = Deployment(tmp_path / "data", tenants=TENANT, extra_args={"provisioner": ["--work-dir", str(tmp_path / "work")]})
    try:
        await deployment.start()
        async with await MusterClient.connect(deployment.nats_url or "", token=deployment.admin_token()) as client:
            await apply_catalog(EventStore(client.nc), TENANT, real_catalog(prefix, nodes_dir), by="test")
            yield Real(client, prefix, nodes_dir, deployment)
    finally:
        await deployment.stop()
        await system.sweep(prefix, [nodes_dir])


async def test_one_real_node_is_made_checked_from_its_process_grown_reconnected_and_deleted(real: Real) -> None:
    cluster = await real.run(CreateCluster(name="one", template="nats-cluster", nodes=1, requested_by="test"))
    info = await real.client.cluster(cluster, tenant=TENANT)
    [(node, ips)] = info.ipaddresses.items()
    assert ips["access_v4"].startswith("10.213.")
    assert await members_by_node(info) == {node: 1}  # nats-server itself answers on the node's address
    assert info.observed == {(node, "nats"): "running"}  # the status check after start asked it too
    await real.run(CheckCluster(cluster_id=cluster, requested_by="test"))  # `muster cluster check`
    info = await real.client.cluster(cluster, tenant=TENANT)
    assert info.observed == {(node, "nats"): "running"} and info.drift == []
    page = await real.page(f"/ui/clusters/{cluster}")  # the console shows the real node as it is
    assert f"access_v4 {ips['access_v4']}" in page and re.search(r'data-testid="node-machine">e[0-9a-f]{4}-[0-9a-f]{8}<br>'
                                                              r'<span class="small">host key SHA256:', page)
    assert "nats: running / running" in page

    # Expanded to two: the first node's nats.conf has no route to the second, and the drift says
    # so (it said nothing); the repair writes it and restarts the server.
    await real.run(ExpandCluster(cluster_id=cluster, nodes=2, requested_by="test"))
    info = await real.client.cluster(cluster, tenant=TENANT)
    assert [(d.node, d.observed, d.repair) for d in info.drift] == [(node, "stale", "reconfigure")]
    assert sorted(c.read_text().count("nats-route://") for c in real.nodes_dir.glob("*/root/nats/nats.conf")) == [1, 2]
    await real.run(RepairCluster(cluster_id=cluster, requested_by="test"))
    info = await real.client.cluster(cluster, tenant=TENANT)
    assert info.drift == [] and all(c.read_text().count("nats-route://") == 2 for c in real.nodes_dir.glob("*/root/nats/nats.conf"))

    # Its sshd dies: a check cannot ask, the state is unknown, and the drift says why. The repair
    # reconnects the node (a repair was refused: nothing brought a node's sshd back): the
    # provider's confirm starts its sshd again, the service is started (it ran all along) and
    # asked; delete still leaves nothing.
    assert kill_sshd(real.prefix, ips["access_v4"])
    await real.run(CheckCluster(cluster_id=cluster, requested_by="test"))
    info = await real.client.cluster(cluster, tenant=TENANT)
    assert [(d.node, d.observed, d.repair) for d in info.drift] == [(node, "unknown", "reconnect")]
    assert f"cannot connect to root@{ips['access_v4']}:22" in info.observed_detail[(node, "nats")]
    repaired = await real.client.run(RepairCluster(cluster_id=cluster, requested_by="test"), tenant=TENANT, timeout=600)
    assert repaired.succeeded, repaired.reason
    info = await real.client.cluster(cluster, tenant=TENANT)
    assert set(info.observed.values()) == {"running"} and info.drift == []
    assert set((await members_by_node(info)).values()) == {2}
    await real.run(DeleteCluster(cluster_id=cluster, requested_by="test"))
    assert real.left() == []


def nats_server_ids(info: object) -> dict[str, str]:
    """Each node's nats-server's server_id (/varz): a new one for every process it starts."""
    import json
    import urllib.request

    ids = {}
    for node, addrs in info.ipaddresses.items():  # type: ignore[attr-defined]
        try:
            with urllib.request.urlopen(f"http://{addrs['access_v4']}:8222/varz", timeout=5) as answer:
                ids[node] = str(json.load(answer)["server_id"])
        except OSError:
            ids[node] = ""
    return ids


def nats_logs(real: Real, lines: int = 8) -> dict[str, list[str]]:
    """The last lines of every node's nats-server log (in the node's own /root), for a failure's message."""
    return {log.parts[-4]: log.read_text(errors="replace").splitlines()[-lines:] for log in real.nodes_dir.glob("*/root/nats/nats.log")}


def kill_sshd(prefix: str, ip: str = "") -> list[int]:
    """SIGKILL the sshd of every node of this run (or of the one at `ip`), as a crash would:
    found by `ip netns pids`."""
    import signal
    import subprocess

    killed = []
    for netns in Path("/run/netns").glob(f"{prefix}-*"):
        addresses = subprocess.run(["ip", "-n", netns.name, "-4", "-o", "addr", "show"], capture_output=True, text=True).stdout
        if ip and f" {ip}/" not in addresses:
            continue
        for pid in subprocess.run(["ip", "netns", "pids", netns.name], capture_output=True, text=True, check=True).stdout.split():
            try:
                if b"sshd" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]:
                    os.kill(int(pid), signal.SIGKILL)
                    killed.append(int(pid))
            except OSError:
                continue
    return killed


@LONG
async def test_a_nats_cluster_grows_survives_a_bad_configure_is_repaired_shrinks_and_goes(real: Real) -> None:
    cluster = await real.run(CreateCluster(name="nats", template="nats-cluster", nodes=3, requested_by="test"))
    # Each install reads every node's address (the routes' macro): it waited for them, and none
    # failed once for want of one (`no bind_v4 address (it has: none yet)`, then retried).
    assert await real.failed_attempts() == []
    info = await real.client.cluster(cluster, tenant=TENANT)
    assert set((await members_by_node(info)).values()) == {3}

    await real.run(ExpandCluster(cluster_id=cluster, nodes=5, requested_by="test"))
    assert await real.failed_attempts() == []
    info = await real.client.cluster(cluster, tenant=TENANT)
    # The old nodes' nats.conf names the three of before: the drift says so (it said nothing).
    assert len({d.node for d in info.drift}) == 3 and {(d.service, d.observed, d.repair) for d in info.drift} == {("nats", "stale", "reconfigure")}
    before = nats_server_ids(info)
    rolled = await real.client.run(ConfigureCluster(cluster_id=cluster, config=info.config, restart=True, rolling=Rolling(batch=1),
                                                    requested_by="test"), tenant=TENANT, timeout=600)
    assert rolled.succeeded, rolled.reason
    counts = await members_by_node(await real.client.cluster(cluster, tenant=TENANT))
    assert len(counts) == 5 and set(counts.values()) == {5}, (counts, nats_logs(real))  # (once: one server gone, the others saw 4)
    assert (await real.client.cluster(cluster, tenant=TENANT)).drift == []
    most, restarted = await down_at_once(real, rolled.reply.job_id)
    assert restarted == set(counts) and most == 1  # every server restarted, never two at once: 4 of 5 always up
    after = nats_server_ids(info)  # a new process on every node (a new server_id each start): each stop did stop its own
    assert [node for node in before if after[node] in ("", before[node])] == [], (before, after)

    bad = {**info.config, "nats": {**info.config["nats"], "settings": {"max_payload": "lots"}}}
    refused = await real.client.run(ConfigureCluster(cluster_id=cluster, config=bad, restart=True, rolling=Rolling(batch=1),
                                                     requested_by="test"), tenant=TENANT, timeout=600)
    assert not refused.succeeded
    assert await down_at_once(real, refused.reply.job_id) == (0, set())  # the config is written first: nothing stopped
    assert set((await members_by_node(await real.client.cluster(cluster, tenant=TENANT))).values()) == {5}  # still healthy

    await real.run(CheckCluster(cluster_id=cluster, requested_by="test"))
    info = await real.client.cluster(cluster, tenant=TENANT)
    assert set(info.observed.values()) == {"running"} and info.drift == []
    victim = sorted(info.ipaddresses)[1]
    killed = kill_member(info.ipaddresses[victim]["access_v4"])
    assert killed
    await real.run(CheckCluster(cluster_id=cluster, requested_by="test"))
    info = await real.client.cluster(cluster, tenant=TENANT)
    assert [(d.node, d.service, d.repair) for d in info.drift] == [(victim, "nats", "start")]
    await real.run(RepairCluster(cluster_id=cluster, requested_by="test"))
    counts = await members_by_node(await real.client.cluster(cluster, tenant=TENANT))
    assert set(counts.values()) == {5}

    await real.run(ShrinkCluster(cluster_id=cluster, nodes=3, requested_by="test"))
    info = await real.client.cluster(cluster, tenant=TENANT)
    assert len(info.nodes) == 3 and set((await members_by_node(info)).values()) == {3}
    # Their configs still name the two nodes gone: stale, and the repair writes them again.
    assert {(d.node, d.repair) for d in info.drift} == {(n.id, "reconfigure") for n in info.nodes}
    await real.run(RepairCluster(cluster_id=cluster, requested_by="test"))
    info = await real.client.cluster(cluster, tenant=TENANT)
    assert info.drift == [] and set((await members_by_node(info)).values()) == {3}
    assert all(conf.read_text().count("nats-route://") == 3 for conf in real.nodes_dir.glob("*/root/nats/nats.conf"))
    await real.run(DeleteCluster(cluster_id=cluster, requested_by="test"))
    assert real.left() == []


@LONG
async def test_redis_replicas_and_the_ansible_flavours_run_every_action(real: Real) -> None:
    """Redis (shell), Redis and NATS (Ansible): create, check, stop, start, remove (the replicas), delete;
    for Redis also what the servers hold: replication, settings, a bad configure, a rolling restart."""
    for template, nodes, services in (("redis-replicated", 3, ["redis-primary", "redis-replica"]),
                                      ("redis-replicated-ansible", 2, ["redis-primary-ansible", "redis-replica-ansible"]),
                                      ("nats-cluster-ansible", 3, ["nats-ansible"])):
        cluster = await real.run(CreateCluster(name=template, template=template, nodes=nodes, requested_by="test"))
        info = await real.client.cluster(cluster, tenant=TENANT)
        assert len(info.observed) == nodes and set(info.observed.values()) == {"running"}, info.observed
        if template.startswith("nats"):
            assert set((await members_by_node(info)).values()) == {nodes}
        else:
            assert replication(info) == {"master": 1, "slave": nodes - 1}  # redis itself says who follows whom
            await redis_keeps_its_data_and_its_good_config(real, cluster, info.config)
        await real.run(StopServices(cluster_id=cluster, requested_by="test"))
        await real.run(CheckCluster(cluster_id=cluster, requested_by="test"))
        info = await real.client.cluster(cluster, tenant=TENANT)
        assert set(info.observed.values()) == {"stopped"}, info.observed
        assert [d for d in info.observed_detail.values() if " does not answer: " not in d] == [], info.observed_detail  # why
        await real.run(StartServices(cluster_id=cluster, requested_by="test"))
        if len(services) > 1:  # a cluster keeps at least one service: the replicas go (stop, remove)
            await real.run(RemoveServices(cluster_id=cluster, services=services[-1:], requested_by="test"))
        else:  # a node whose sshd died: ansible cannot ask, so its state is unknown (it said `failed`, and repair reinstalled)
            victim = sorted(info.ipaddresses)[0]
            assert kill_sshd(real.prefix, info.ipaddresses[victim]["access_v4"])
            await real.run(CheckCluster(cluster_id=cluster, requested_by="test"))
            info = await real.client.cluster(cluster, tenant=TENANT)
            assert [(d.node, d.observed, d.repair) for d in info.drift] == [(victim, "unknown", "reconnect")]
            assert "Connection refused" in info.observed_detail[(victim, services[0])]
            await real.run(RepairCluster(cluster_id=cluster, requested_by="test"))  # its sshd back, ansible asks again
            info = await real.client.cluster(cluster, tenant=TENANT)
            assert info.drift == [] and set(info.observed.values()) == {"running"}, info.drift
        await real.run(DeleteCluster(cluster_id=cluster, requested_by="test"))
    assert real.left() == []


async def down_at_once(real: Real, job_id: str) -> tuple[int, set[str]]:
    """From the planner's records of the job, in log order: the most nodes whose service was down at
    once (from its stop being sent to its start being taken as done: wider than the real window,
    never narrower), and the nodes restarted. A stop queued alone is sent when queued; one queued
    as a segment's follower (`after`, decision 58) when the step before it is taken as done, and
    never if that step failed (the stop then ends unrun)."""
    queued: dict[str, TaskQueued] = {}
    down: set[str] = set()
    restarted: set[str] = set()
    most = 0

    def stop_sent(stop: TaskQueued) -> None:
        nonlocal most
        down.add(stop.node)
        most = max(most, len(down))

    async for recorded in real.client.events(job_id, tenant=TENANT):
        event = recorded.event
        if isinstance(event, TaskQueued):
            queued[event.task_id] = event
            if event.action is Action.STOP and event.after is None:
                stop_sent(event)
        elif isinstance(event, TaskCompleted):
            done = queued[event.task_id]
            for follower in queued.values():
                if follower.after == event.task_id and follower.action is Action.STOP:
                    stop_sent(follower)
            if done.action is Action.START:
                down.discard(done.node)
                restarted.add(done.node)
    return most, restarted


def replication(info: object) -> dict[str, int]:
    roles: dict[str, int] = {}
    for addrs in info.ipaddresses.values():  # type: ignore[attr-defined]
        out = redis(addrs["access_v4"], "info", "replication")
        role = next((line.split(":")[1].strip() for line in out.splitlines() if line.startswith("role:")), "none")
        roles[role] = roles.get(role, 0) + 1
    return roles


def run_ids(ips: list[str]) -> dict[str, str]:
    """Each server's run_id: a new one for every process redis-server starts."""
    return {ip: next((line.split(":")[1].strip() for line in redis(ip, "info", "server").splitlines() if line.startswith("run_id:")), "")
            for ip in ips}


def redis(ip: str, *command: str, stdin: str | None = None) -> str:
    import subprocess

    return subprocess.run(["redis-cli", "-h", ip, *command], input=stdin, capture_output=True, text=True, timeout=10).stdout


async def redis_keeps_its_data_and_its_good_config(real: Real, cluster: str, config: dict[str, object]) -> None:
    """A key written on the primary is read on every replica; a good setting reaches every server;
    a bad one is refused by redis-server itself and rolls back; a rolling restart (the primary
    too) keeps the data."""
    info = await real.client.cluster(cluster, tenant=TENANT)
    ips = [addrs["access_v4"] for addrs in info.ipaddresses.values()]
    [primary] = [ip for ip in ips if "role:master" in redis(ip, "info", "replication")]
    replicas = len(ips) - 1  # WAIT: on the SET's connection, until every replica has acknowledged it (5 s at most)
    assert redis(primary, stdin=f"SET greeting hello\nWAIT {replicas} 5000\n").split() == ["OK", str(replicas)]
    assert {redis(ip, "get", "greeting").strip() for ip in ips} == {"hello"}

    def settings(maxmemory: str) -> dict[str, object]:
        return {**config, "redis": {**config["redis"], "settings": {"maxmemory": maxmemory}}}  # type: ignore[dict-item]

    await real.run(ConfigureCluster(cluster_id=cluster, config=settings("64mb"), restart=True, rolling=Rolling(batch=1), requested_by="test"))
    assert {ip: redis(ip, "config", "get", "maxmemory").split()[-1:] for ip in ips} == {ip: [str(64 << 20)] for ip in ips}
    bad = await real.client.run(ConfigureCluster(cluster_id=cluster, config=settings("lots"), restart=True, rolling=Rolling(batch=1),
                                                 requested_by="test"), tenant=TENANT, timeout=600)
    assert not bad.succeeded
    failed = [r.event async for r in real.client.events(bad.reply.job_id, tenant=TENANT)
              if isinstance(r.event, TaskAttemptFailed) and r.event.error not in UNRUN]  # (not a segment's step ended unrun)
    errors = [f.error for f in failed]
    assert errors and all("'maxmemory lots'" in error for error in errors), errors  # redis-server's own words
    # Permanent in both flavours (exit 78): no task is tried twice (the Ansible one's was, three times).
    assert len({f.task_id for f in failed}) == len(failed) and all("permanent" in error for error in errors), errors
    assert await down_at_once(real, bad.reply.job_id) == (0, set())  # refused before any server stopped
    # A config a replica cannot link with (its primary where nothing answers): its start fails saying what
    # it waited for and what it saw, and stops the server it started, so the rollback's start (after its
    # configure put the good config back) starts it on that; it found it `already running` on the undone one.
    nowhere = primary.rsplit(".", 1)[0] + ".250"
    unlinked = settings("64mb")
    unlinked["redis"] = {**config["redis"], "settings": {"maxmemory": "64mb"}, "primary": nowhere, "link_wait_s": 3}  # type: ignore[dict-item]
    lost = await real.client.run(ConfigureCluster(cluster_id=cluster, config=unlinked, restart=True, rolling=Rolling(batch=1),
                                                  requested_by="test"), tenant=TENANT, timeout=600)
    assert not lost.succeeded
    errors = [r.event.error async for r in real.client.events(lost.reply.job_id, tenant=TENANT)
              if isinstance(r.event, TaskAttemptFailed) and r.event.error not in UNRUN]
    assert errors and all("started, but no link to the primary after 3 s (redis.link_wait_s), stopped the redis-server it started; "
                          f"it said: master_host:{nowhere} master_link_status:down" in error for error in errors), errors
    # (the rollback restarted the primary last: WAIT until every replica has linked again and acknowledged)
    assert redis(primary, stdin=f"SET unlinked no\nWAIT {replicas} 15000\n").split() == ["OK", str(replicas)]
    assert all(f"master_host:{primary}\nmaster_port:6379\nmaster_link_status:up" in redis(ip, "info", "replication")
               for ip in ips if ip != primary), {ip: redis(ip, "info", "replication") for ip in ips}
    before = run_ids(ips)
    await real.run(RestartServices(cluster_id=cluster, rolling=Rolling(batch=1), requested_by="test"))
    after = run_ids(ips)
    assert [ip for ip in ips if after[ip] in ("", before[ip])] == []  # every server was restarted: a new process answers
    assert replication(await real.client.cluster(cluster, tenant=TENANT)) == {"master": 1, "slave": replicas}
    assert redis(primary, stdin=f"SET after restart\nWAIT {replicas} 5000\n").split() == ["OK", str(replicas)]  # all linked again
    assert {redis(ip, "get", "greeting").strip() for ip in ips} == {"hello"}
    assert {redis(ip, "config", "get", "maxmemory").split()[-1] for ip in ips} == {str(64 << 20)}  # the good config stays


@LONG
def test_muster_demo_real_shows_what_the_servers_say_and_keeps_its_cluster_until_ctrl_c(tmp_path: Path) -> None:
    """The whole story, with --keep: the cluster stays, its servers answering, until Ctrl-C, which
    deletes it (until session 35 --real took --keep and deleted the cluster at once)."""
    import signal
    import subprocess
    import sys

    if system.root_refusal():
        pytest.skip(str(system.root_refusal()))
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "MUSTER_TOKEN", "MUSTER_AUTH_SYSTEM_TOKEN")}
    lines: list[str] = []
    with subprocess.Popen([sys.executable, "-m", "muster", "demo", "--real", "--keep", "--data-dir", str(tmp_path / "data")],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**env, "COLUMNS": "160"},
                          cwd=tmp_path) as demo:
        try:
            assert demo.stdout is not None
            for line in demo.stdout:  # up to the word that it keeps the cluster: it then waits for Ctrl-C
                lines.append(line)
                if line.startswith("kept running: "):
                    break
            said = "".join(lines)
            assert lines and lines[-1].startswith("kept running: cluster nats-"), said
            prefix = said.split("(prefix ")[1].split(")")[0]
            assert f"export MUSTER_DATA_DIR={(tmp_path / 'data').resolve()}" in lines[-1] and "Ctrl-C deletes it" in lines[-1]
            assert len(list(Path("/run/netns").glob(f"{prefix}-*"))) == 3 and demo.poll() is None  # kept, and the demo waits
            demo.send_signal(signal.SIGINT)
            lines.extend(demo.stdout)
            assert demo.wait(timeout=300) == 0, "".join(lines)
        finally:
            if demo.poll() is None:
                demo.kill()
                demo.wait()
    out = "".join(lines)
    assert "create 3 nodes: job" in out and "expand to 5: job" in out and "check: job" in out
    rows = [line for line in out.splitlines() if "nats running" in line]
    # (in a pipe the table is plain columns two spaces apart: muster.tables; the fourth, members seen)
    assert [re.split(r"\s{2,}", line.strip())[3] for line in rows] == ["3"] * 3 + ["5"] * 5 + ["3"] * 3, out
    assert re.search(r"configure with a bad setting \(max_payload: lots\): job \S+ ended JobRolledBack", out)
    # After the bad configure and after repair every one of the five answers (how many peers a server
    # restarted a moment ago has routes to yet is the snapshot's; the exact counts are test_a_nats_cluster_...'s).
    assert len(re.findall(r"members each server sees after it: (?:\d, ){4}\d\n", out)) == 2, out
    assert re.search(r"killed by hand: nats-server of node \S+ on 10\.213\.\S+ \(pid \d+\)", out)
    assert re.search(r"drift: node \S+ nats is stopped, should be running \(repair: start\)", out)
    stale = re.findall(r"drift: node \S+ nats is stale, should be running \(repair: reconfigure\)", out)
    assert len(stale) == 3 + 3 and re.search(r"repair the stale configs: job \S+ succeeded", out), out  # after the expand, the shrink
    assert re.search(r"repair: job \S+ succeeded", out) and re.search(r"shrink to 3: job \S+ succeeded", out)
    assert "delete: job" in out and out.rstrip().endswith("everything stopped.")
    assert "Traceback" not in out
    assert not list(Path("/run/netns").glob(f"{prefix}-*")) and not list(Path("/sys/class/net").glob(f"{prefix}-*"))


def test_an_interrupted_muster_demo_real_deletes_its_nodes(tmp_path: Path) -> None:
    """Ctrl-C while the demo waits for a job (here its expand): the delete was refused (`busy`),
    and the namespaces, veths, bridge, sshds and nats-servers stayed after "everything stopped."
    The demo now cancels the job, deletes the cluster, and sweeps its own prefix."""
    import asyncio
    import signal
    import subprocess
    import sys

    if system.root_refusal():
        pytest.skip(str(system.root_refusal()))
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "MUSTER_TOKEN", "MUSTER_AUTH_SYSTEM_TOKEN")}
    nodes_dir, prefix, out = tmp_path / "data" / "nodes", "", []
    with subprocess.Popen([sys.executable, "-m", "muster", "demo", "--real", "--data-dir", str(tmp_path / "data")],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**env, "COLUMNS": "160"},
                          cwd=tmp_path) as demo:
        try:
            assert demo.stdout is not None
            for line in demo.stdout:  # up to the three nodes' table: the demo then waits for its expand
                out.append(line)
                prefix = prefix or (line.split("(prefix ")[1].split(")")[0] if "(prefix " in line else "")
                if sum("nats running" in seen for seen in out) == 3:
                    break
            assert prefix and sum("nats running" in seen for seen in out) == 3, "".join(out)
            demo.send_signal(signal.SIGINT)
            out.extend(demo.stdout)
            assert demo.wait(timeout=300) == 0, "".join(out)
            said = "".join(out)
            assert re.search(r"delete: job \S+ succeeded", said) and said.rstrip().endswith("everything stopped."), said
            assert "Traceback" not in said
            left = [*Path("/run/netns").glob(f"{prefix}-*"), *Path("/sys/class/net").glob(f"{prefix}-*"), *nodes_dir.glob(f"{prefix}-*")]
            assert left == [], said
        finally:
            if demo.poll() is None:
                demo.kill()
                demo.wait()
            if prefix:  # (what main left, for the next run)
                asyncio.run(system.sweep(prefix, [nodes_dir]))


@LONG
async def test_without_root_the_same_cluster_forms_on_loopback_addresses(real: Real) -> None:
    """The localhost provider's nodes (each its own 127.x.y.z): the fallback where namespaces cannot be made."""
    await apply_catalog(EventStore(real.client.nc), TENANT, real_catalog(real.prefix, real.nodes_dir, provider="local"), by="test")
    cluster = await real.run(CreateCluster(name="loop", template="nats-cluster", nodes=2, requested_by="test"))
    assert await real.failed_attempts() == []  # each install waited for the other node's address
    info = await real.client.cluster(cluster, tenant=TENANT)
    assert all(ips["access_v4"].startswith("127.77.") for ips in info.ipaddresses.values())
    assert set((await members_by_node(info)).values()) == {2}
    await real.run(DeleteCluster(cluster_id=cluster, requested_by="test"))


@LONG
def test_muster_demo_pool_real_lends_namespace_hosts(tmp_path: Path) -> None:
    import subprocess
    import sys

    if system.root_refusal():
        pytest.skip(str(system.root_refusal()))
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "MUSTER_TOKEN", "MUSTER_AUTH_SYSTEM_TOKEN")}
    done = subprocess.run([sys.executable, "-m", "muster", "demo", "--pool", "--real", "--data-dir", str(tmp_path / "data")],
                          capture_output=True, text=True, env={**env, "COLUMNS": "160"}, cwd=tmp_path, timeout=800)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "4 hosts registered in pool lab (namespace nodes with their own sshd: 10.213." in out
    assert "create of blog (2 nodes) accepted at once" in out and "pool lab: 4 hosts, 4 free, 0 waiting" in out
    assert out.rstrip().endswith("everything stopped.")
