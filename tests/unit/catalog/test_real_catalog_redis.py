"""The Redis actions of examples/catalog-real (shell flavour), run here with `sh` as a node runs
them: the config's `redis.settings` reach redis.conf, and a bad setting is refused by redis-server
itself before it replaces the good file (the running server keeps its config; the job rolls back);
a primary and a replica on loopback addresses of their own, for what stop and start must do.
The whole cluster's story is tests/e2e/test_real.py's (make test-long)."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from contracts.catalog import Action
from muster.catalog.files import load_sources
from muster.runtime.real_demo import REAL_CATALOG
from services.provisioner.plugins.builtin.shell.automator import PERMANENT_EXIT

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="Debian's redis-server is not installed")


def script(action: Action) -> str:
    catalog = load_sources([REAL_CATALOG / "catalog.yaml"]).catalog
    return str(catalog.services["redis-replica"].provisioner.actions[action].fields["script"])


def configure(home: Path, settings: dict[str, Any], primary: str = "10.0.0.1", config: Any = None,
              services: str = "redis-replica") -> subprocess.CompletedProcess[str]:
    (home / "redis").mkdir(exist_ok=True)
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "HOME": str(home), "MUSTER_IP": "127.0.0.1", "MUSTER_SERVICES": services,
           "MUSTER_CONFIG": json.dumps({"redis": {"primary": primary, "settings": settings}} if config is None else config)}
    return subprocess.run(["sh", "-c", script(Action.CONFIGURE)], env=env, cwd=home, capture_output=True, text=True, timeout=30)


def test_settings_reach_redis_conf_and_a_bad_one_never_replaces_the_good_file(tmp_path: Path) -> None:
    good = configure(tmp_path, {"maxmemory": "64mb", "lazyfree-lazy-eviction": True})
    assert good.returncode == 0, good.stderr
    conf = (tmp_path / "redis" / "redis.conf").read_text().splitlines()
    assert {"maxmemory 64mb", "lazyfree-lazy-eviction yes", "replicaof 10.0.0.1 6379", "appendonly yes"} <= set(conf)

    bad = configure(tmp_path, {"maxmemory": "lots"})
    assert bad.returncode == PERMANENT_EXIT  # the same config fails the same way: the planner does not try it again
    assert "'maxmemory lots'" in bad.stderr and "argument must be a memory value" in bad.stderr  # redis-server's own words
    assert (tmp_path / "redis" / "redis.conf").read_text().splitlines() == conf


def test_a_config_of_the_wrong_shape_fails_permanently_naming_the_setting(tmp_path: Path) -> None:
    """A configure without `primary` (a config replaces the template's `redis` key as a whole) said
    `KeyError: 'primary'`, three times; `settings` as a list `AttributeError: 'list' object has no
    attribute 'items'`."""
    for config, said in (
        ({}, "config: redis is null: an object (primary, settings, link_wait_s) is needed"),
        ({"redis": "10.0.0.1"}, 'config: redis is "10.0.0.1": an object'),
        ({"redis": {"settings": {"maxmemory": "64mb"}}}, "config: redis.primary is null: the primary's address is needed"),
        ({"redis": {"primary": "10.0.0.1", "settings": ["maxmemory", "64mb"]}}, 'config: redis.settings is ["maxmemory", "64mb"]: an object'),
        ({"redis": {"primary": "10.0.0.1", "link_wait_s": "soon"}}, 'config: redis.link_wait_s is "soon": a whole number'),
    ):
        out = configure(tmp_path, {}, config=config)
        assert out.returncode == PERMANENT_EXIT and said in out.stderr, (config, out.returncode, out.stderr)
        assert "Traceback" not in out.stderr and not (tmp_path / "redis" / "redis.conf").exists()
    # A primary has no use for `primary`: its config without one is good.
    assert configure(tmp_path, {}, config={"redis": {"settings": {"maxmemory": "64mb"}}}, services="redis-primary").returncode == 0


def test_a_primary_left_a_macro_fails_permanently_naming_the_flavours_own(tmp_path: Path) -> None:
    """The Ansible flavour's /tmp/redis.yaml on this one (or the reverse): its macro names a service
    the cluster has not, stays as written, and the replica waited for a host of that name."""
    bad = configure(tmp_path, {}, primary="%ip.service.redis-primary-ansible%")
    assert bad.returncode == PERMANENT_EXIT, bad.stderr
    assert "redis.primary is '%ip.service.redis-primary-ansible%': a macro left as written" in bad.stderr
    assert "this flavour's primary is %ip.service.redis-primary%" in bad.stderr
    assert not (tmp_path / "redis" / "redis.conf").exists()


def test_an_install_without_redis_server_fails_permanently_saying_what_to_install(tmp_path: Path) -> None:
    """Exit status 1: the planner tried it three times."""
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path), "MUSTER_HOSTNAME": "n1", "MUSTER_EXIT_PERMANENT": str(PERMANENT_EXIT)}
    missing = subprocess.run(["/bin/sh", "-c", script(Action.INSTALL)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert missing.returncode == PERMANENT_EXIT, (missing.returncode, missing.stderr)
    assert "redis-server is not installed on n1 (Debian's redis-server package" in missing.stderr


def test_a_stop_keeps_the_data_a_restarted_primary_comes_back_with() -> None:
    """Without persistence a restarted primary comes back empty and its replicas follow it; the stop
    must not throw the data away either."""
    assert "nosave" not in script(Action.STOP)


@dataclass
class Node:
    home: Path
    ip: str
    service: str
    primary: str

    def run(self, action: Action, settings: dict[str, Any] | None = None, **redis: Any) -> subprocess.CompletedProcess[str]:
        (self.home / "redis").mkdir(parents=True, exist_ok=True)
        env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "HOME": str(self.home), "MUSTER_IP": self.ip, "MUSTER_SERVICES": self.service,
               "MUSTER_CONFIG": json.dumps({"redis": {"primary": self.primary, "settings": settings or {}, **redis}})}
        return subprocess.run(["sh", "-c", script(action)], env=env, cwd=self.home, capture_output=True, text=True, timeout=150)

    def up(self, settings: dict[str, Any] | None = None) -> None:
        for action in (Action.CONFIGURE, Action.START):
            done = self.run(action, settings)
            assert done.returncode == 0, (action, done.stdout, done.stderr)

    def cli(self, *command: str, stdin: str | None = None) -> str:
        return subprocess.run(["redis-cli", "-h", self.ip, *command], input=stdin, capture_output=True, text=True, timeout=10).stdout

    def log(self) -> str:
        return (self.home / "redis" / "redis.log").read_text(errors="replace")


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Node, Node]]:
    """A primary and its replica, each on a loopback address of its own (port 6379 as on a node)."""
    net = f"127.79.{random.randrange(256)}"
    primary = Node(tmp_path / "primary", f"{net}.1", "redis-primary", f"{net}.1")
    replica = Node(tmp_path / "replica", f"{net}.2", "redis-replica", f"{net}.1")
    try:
        yield primary, replica
    finally:
        for node in (primary, replica):  # whatever still runs there, named by the server itself
            for line in node.cli("info", "server").splitlines():
                if line.startswith("process_id:"):
                    os.kill(int(line.split(":")[1]), signal.SIGKILL)


def test_a_replica_writing_its_first_aof_is_stopped_by_asking_again(pair: tuple[Node, Node]) -> None:
    """A replica refuses SHUTDOWN while it writes its first AOF after a sync, which starts as its link
    comes up (its start, its primary's restart). A stop that asked once and waited left it running
    (the start that followed could not listen, and the old config stayed: a rolling configure's
    maxmemory read 0), or TERMed it 15 s later."""
    primary, replica = pair
    primary.up()
    assert primary.cli(stdin="".join(f"SET k{i} v\n" for i in range(20))).split() == ["OK"] * 20
    replica.up({"rdb-key-save-delay": 200_000})  # 0.2 s a key: the replica's first AOF takes 4 s to write
    assert "aof_rewrite_in_progress:1" in replica.cli("info", "persistence")
    stopped = replica.run(Action.STOP)
    assert stopped.returncode == 0, stopped.stderr
    assert replica.cli("ping") == ""  # gone
    log = replica.log()
    assert "Writing initial AOF, can't exit" in log  # it did refuse
    assert "Received SIGTERM" not in log  # the SHUTDOWN asked again stopped it, with its data


def test_a_start_where_another_server_keeps_the_address_fails_saying_so(pair: tuple[Node, Node]) -> None:
    """A daemonized redis-server that cannot listen exits saying nothing: the start said 'started'
    and the server already there went on with its old config."""
    primary, _ = pair
    primary.up()
    pid = (primary.home / "redis" / "redis.pid").read_text().strip()
    again = primary.run(Action.START)
    assert again.returncode == 0 and again.stdout.strip() == "already running"
    (primary.home / "redis" / "redis.pid").unlink()  # a server its pidfile no longer names
    refused = primary.run(Action.START)
    assert refused.returncode != 0 and f"another redis-server answers on {primary.ip}:6379" in refused.stderr, refused
    assert f"process_id:{pid}" in primary.cli("info", "server")  # still the first one


def test_a_start_of_a_replica_already_running_waits_for_its_link_too(pair: tuple[Node, Node]) -> None:
    """A start that waited 60 s for the link and failed left the server running: its retry found it
    `already running` and passed at once, the link still down (the job went on to a failing status)."""
    primary, replica = pair
    primary.up()
    replica.up()
    again = replica.run(Action.START)
    assert again.returncode == 0 and again.stdout.strip() == "already running, in sync with the primary", again


def test_a_stop_stops_only_this_nodes_own_server_not_what_has_its_old_pid_now(pair: tuple[Node, Node]) -> None:
    """A redis-server killed by hand leaves its pidfile; pids are the host's and reused, and the stop,
    its own address not answering, TERMed whatever ran under that number then: another node's server."""
    primary, replica = pair
    replica.home.joinpath("redis").mkdir(parents=True)
    primary.home.mkdir(parents=True)
    other = subprocess.Popen(["redis-server", "60"], executable="/bin/sleep", cwd=primary.home)  # another node's, as ps sees it
    try:
        (replica.home / "redis" / "redis.pid").write_text(f"{other.pid}\n")
        stopped = replica.run(Action.STOP)
        assert stopped.returncode == 0, stopped.stderr
        assert other.poll() is None, "the stop killed another node's process"
        assert f"not running (pid {other.pid} is not this node's redis-server)" in stopped.stdout
    finally:
        other.kill()
        other.wait()
    primary.up()  # its own server it does stop (the SHUTDOWN of the test above, through the same check)
    pid = (primary.home / "redis" / "redis.pid").read_text().strip()
    stopped = primary.run(Action.STOP)
    assert stopped.stdout.strip() == f"stopped pid {pid}" and primary.cli("ping") == "", stopped


def test_a_replica_start_with_no_link_stops_what_it_started_so_the_rollback_starts_the_good_config(pair: tuple[Node, Node]) -> None:
    """A configure --restart whose new config starts a replica that never links: the start failed
    and left the server running on that config; the rollback's configure put the good file back,
    and its start found the server `already running` (on the bad config) and waited for a link
    that never came. The failed start stops what it started and says what it waited for."""
    primary, replica = pair
    primary.up()
    replica.up()
    assert replica.run(Action.STOP).returncode == 0
    nowhere = replace(replica, primary=primary.ip.rsplit(".", 1)[0] + ".9")  # nothing listens there
    assert nowhere.run(Action.CONFIGURE).returncode == 0  # redis-server reads it well: only the link tells
    failed = nowhere.run(Action.START, link_wait_s=2)
    assert failed.returncode == 1, failed
    assert "started, but no link to the primary after 2 s (redis.link_wait_s), stopped the redis-server it started; it said: " in failed.stderr, failed.stderr
    assert f"it said: master_host:{nowhere.primary} master_link_status:down ; its log: " in failed.stderr
    assert "Connection refused" in failed.stderr and replica.cli("ping") == ""  # its log's last line
    # the rollback: configure (the old config), start
    assert replica.run(Action.CONFIGURE).returncode == 0
    back = replica.run(Action.START)
    assert back.returncode == 0 and back.stdout.strip() == "started, in sync with the primary", back
    assert f"master_host:{primary.ip}" in replica.cli("info", "replication")


def test_a_start_finding_its_server_on_another_config_than_the_file_restarts_it(pair: tuple[Node, Node]) -> None:
    """The same rollback where the failed start could not stop the server (its task killed at its
    deadline while it waited): the server runs the undone config, and the start restarts it on the
    file's. One on the file's config is left as it is."""
    primary, _ = pair
    primary.up({"maxmemory": "32mb"})
    pid = (primary.home / "redis" / "redis.pid").read_text().strip()
    assert primary.run(Action.CONFIGURE, {"maxmemory": "64mb"}).returncode == 0
    again = primary.run(Action.START)
    assert again.returncode == 0 and again.stdout.strip() == "started (it ran another config: restarted)", again
    assert primary.cli("config", "get", "maxmemory").split() == ["maxmemory", str(64 << 20)]
    assert f"process_id:{pid}" not in primary.cli("info", "server")
    same = primary.run(Action.START)
    assert same.returncode == 0 and same.stdout.strip() == "already running", same


def test_a_start_whose_pidfile_names_another_nodes_server_starts_its_own_and_leaves_that_one(pair: tuple[Node, Node]) -> None:
    """A redis-server killed by hand leaves its pidfile, and its pid may be another node's
    redis-server by the time the repair starts it: the start took that server for its own, said
    `already running` and started nothing (the repair rolled back on the status), or, its config
    file newer, stopped that other node's server."""
    primary, replica = pair
    primary.up()
    other = (primary.home / "redis" / "redis.pid").read_text().strip()
    mine = replica.home / "redis"
    for same_config in (True, False):
        assert replica.run(Action.CONFIGURE).returncode == 0
        (mine / "redis.pid").write_text(f"{other}\n")
        if same_config:
            (mine / "redis.conf.running").write_bytes((mine / "redis.conf").read_bytes())
        started = replica.run(Action.START)
        assert started.returncode == 0, (same_config, started.stdout, started.stderr)
        assert started.stdout.strip() == "started, in sync with the primary", (same_config, started.stdout)
        assert f"process_id:{other}" in primary.cli("info", "server"), "the start stopped another node's server"
        assert replica.run(Action.STOP).returncode == 0 and replica.cli("ping") == ""
