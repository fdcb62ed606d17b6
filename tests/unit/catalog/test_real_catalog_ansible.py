"""The configure step of examples/catalog-real's Ansible flavour, run here by ansible-runner on
this host (a local connection) and read as the ansible automator reads a run (`AnsibleLog`,
`outcome`): what fails for good is permanent (the job rolls back at once: it was tried three
times) and says why. A config the server itself refuses, and the good one kept, is
tests/integration/provisioner/test_real_ansible_flavours.py's (once, since session 25). The whole
cluster's story is tests/e2e/test_real.py's (make test-long)."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contracts.catalog import Action
from muster.bus.server import nats_server_binary
from muster.runtime.real_demo import REAL_CATALOG
from services.provisioner.plugins.base import PERMANENT_EXIT, TaskOutcome
from services.provisioner.plugins.builtin.ansible.automator import outcome
from services.provisioner.plugins.builtin.ansible.events import AnsibleLog


def configure(tmp_path: Path, playbook: str, service: str, config: dict[str, Any], step: str = "configure",
              ip: str = "127.0.0.1", path: str = "") -> TaskOutcome:
    import ansible_runner

    log = AnsibleLog()
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    muster = {"service": service, "cluster_id": "c1", "node": {"id": "n1", "hostname": "n1", "ip": ip}, "config": config,
              "exit_permanent": PERMANENT_EXIT}  # as the automator gives it (`muster_vars`)
    runner = ansible_runner.run(
        private_data_dir=str(work), playbook=str(REAL_CATALOG / "ansible" / playbook), quiet=True,
        inventory={"all": {"hosts": {"n1": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}},
        extravars={"step": step, "muster": muster, "muster_home": str(tmp_path)}, event_handler=log.handle,
        envvars={"PATH": f"{Path(sys.executable).parent}:{path or os.environ.get('PATH', '/usr/bin:/bin')}", "ANSIBLE_NOCOLOR": "1",
                 "ANSIBLE_LOCAL_TEMP": str(work / "tmp")})
    return outcome(f"{service} {step}", Action(step), str(runner.status), runner.rc, log)


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="Debian's redis-server is not installed")
def test_redis_a_primary_left_a_macro_fails_permanently_naming_the_flavours_own(tmp_path: Path) -> None:
    """The shell flavour's /tmp/redis.yaml (docs: `%ip.service.redis-primary%`) on this one: the
    macro stays as written, and each replica's start waited 60 s for it three times (`no message`)."""
    (tmp_path / "redis").mkdir()
    bad = configure(tmp_path, "redis.yml", "redis-replica-ansible", {"redis": {"primary": "%ip.service.redis-primary%"}})
    assert not bad.ok and bad.permanent, bad
    assert "redis.primary is '%ip.service.redis-primary%': a macro left as written" in bad.error, bad.error
    assert "this flavour's primary is %ip.service.redis-primary-ansible%" in bad.error
    assert not (tmp_path / "redis" / "redis.conf").exists()
    primary = configure(tmp_path, "redis.yml", "redis-primary-ansible", {"redis": {"primary": "%ip.service.redis-primary%"}})
    assert primary.ok, primary.error  # (the primary has no primary)


@pytest.fixture
def loopback() -> Iterator[str]:
    """A /24 of loopback addresses of this test's own; whatever redis-server still answers on .1
    or .2 is killed after it (named by the server itself)."""
    net = f"127.78.{random.randrange(256)}"
    yield net
    for ip in (f"{net}.1", f"{net}.2"):
        said = subprocess.run(["redis-cli", "-h", ip, "info", "server"], capture_output=True, text=True, timeout=10).stdout
        for line in said.splitlines():
            if line.startswith("process_id:"):
                os.kill(int(line.split(":")[1]), signal.SIGKILL)


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="Debian's redis-server is not installed")
def test_redis_a_replica_start_with_no_link_says_what_it_waited_for_and_stops_what_it_started(tmp_path: Path, loopback: str) -> None:
    """The link wait (an `until` that ran out) failed with `no message`, and left the server it had
    started running on the new config: the rollback's start (after its configure put the old
    config back) found it `already running` and the replica stayed on the undone config."""
    primary, replica = tmp_path / "primary", tmp_path / "replica"
    for home in (primary, replica):
        (home / "redis").mkdir(parents=True)

    def step(home: Path, service: str, ip: str, what: str, primary_ip: str, **redis: Any) -> TaskOutcome:
        return configure(home, "redis.yml", service, {"redis": {"primary": primary_ip, **redis}}, step=what, ip=ip)

    p_ip, r_ip, nowhere = f"{loopback}.1", f"{loopback}.2", f"{loopback}.9"
    for what in ("configure", "start"):
        done = step(primary, "redis-primary-ansible", p_ip, what, p_ip)
        assert done.ok, done.error
    assert step(replica, "redis-replica-ansible", r_ip, "configure", nowhere).ok  # a primary where nothing listens
    failed = step(replica, "redis-replica-ansible", r_ip, "start", nowhere, link_wait_s=2)
    assert not failed.ok and not failed.permanent, failed
    assert "started, but no link to the primary after 2 s (redis.link_wait_s), stopped the redis-server it started; it said: " in failed.error, failed.error
    assert f"it said: master_host:{nowhere} master_link_status:down ; its log: " in failed.error
    assert "Connection refused" in failed.error, failed.error  # its log's last line
    # the rollback: configure (the old config), start
    assert step(replica, "redis-replica-ansible", r_ip, "configure", p_ip).ok
    back = step(replica, "redis-replica-ansible", r_ip, "start", p_ip)
    assert back.ok, back.error
    info = subprocess.run(["redis-cli", "-h", r_ip, "info", "replication"], capture_output=True, text=True, timeout=10).stdout
    assert f"master_host:{p_ip}" in info and "master_link_status:up" in info, info


def test_nats_an_install_without_the_binary_fails_permanently_naming_the_setting(tmp_path: Path) -> None:
    """It failed in a lookup ansible reports as a plugin error, and was tried three times."""
    for binary in ("nats-server-not-here", "/nowhere/nats-server"):
        missing = configure(tmp_path, "nats.yml", "nats-ansible", {"nats": {"binary": binary, "routes": ""}}, step="install")
        assert not missing.ok and missing.permanent, missing
        assert f"no nats-server '{binary}' on the provisioner (nats.binary: a path, or a name on its PATH" in missing.error
    found = configure(tmp_path, "nats.yml", "nats-ansible", {"nats": {"binary": nats_server_binary(), "routes": ""}}, step="install")
    assert found.ok, found.error
    assert (tmp_path / "nats" / "nats-server").stat().st_size > 0


def test_a_config_of_the_wrong_shape_fails_permanently_naming_the_setting_in_both_playbooks(tmp_path: Path) -> None:
    """A configure without `routes` (or a replica's without `primary`: a config replaces the
    template's key as a whole) said `object of type 'dict' has no attribute 'routes'`, three times."""
    (tmp_path / "nats").mkdir()
    (tmp_path / "redis").mkdir()
    for playbook, service, config, step, said in (
        ("nats.yml", "nats-ansible", {}, "install", "config: nats is null: an object (binary, routes, settings) is needed"),
        ("nats.yml", "nats-ansible", {"nats": {"binary": nats_server_binary(), "routez": "x"}}, "configure",
         "config: nats.routes is null: the members' nats-route:// URLs, comma-separated, are needed"),
        ("nats.yml", "nats-ansible", {"nats": {"routes": "", "settings": [1]}}, "configure", "config: nats.settings is [1]: an object"),
        ("redis.yml", "redis-replica-ansible", {"redis": {"settings": {}}}, "configure", "config: redis.primary is null: the primary's address"),
        ("redis.yml", "redis-replica-ansible", {"redis": {"primary": "10.0.0.1", "link_wait_s": "soon"}}, "configure",
         'config: redis.link_wait_s is "soon": a whole number'),
    ):
        bad = configure(tmp_path, playbook, service, config, step=step)
        assert not bad.ok and bad.permanent, (config, bad)
        assert said in bad.error, (config, bad.error)


def test_nats_a_stop_and_a_start_take_only_this_nodes_own_server_not_what_has_its_old_pid_now(tmp_path: Path) -> None:
    """A nats-server killed by hand leaves its pidfile; pids are the host's and reused (32768 here).
    The playbook's stop killed whatever ran under that number then (a process of the host, another
    node's server), and its start took another node's server for its own (`already running`)."""
    ip = f"127.{random.randrange(100, 250)}.{random.randrange(1, 250)}.{random.randrange(1, 250)}"
    config = {"nats": {"binary": nats_server_binary(), "routes": ""}}
    for step in ("install", "configure"):
        done = configure(tmp_path, "nats.yml", "nats-ansible", config, step=step, ip=ip)
        assert done.ok, done.error
    pidfile = tmp_path / "nats" / "nats.pid"

    def servers_in(where: Path) -> list[int]:  # the live nats-servers started in that directory
        found = []
        for proc in Path("/proc").glob("[0-9]*"):
            with contextlib.suppress(OSError):
                if b"nats-server" in (proc / "cmdline").read_bytes() and (proc / "cwd").readlink() == where \
                        and b"State:\tZ" not in (proc / "status").read_bytes():
                    found.append(int(proc.name))
        return found

    elsewhere = tmp_path / "another-node"
    elsewhere.mkdir()
    other = subprocess.Popen(["nats-server", "60"], executable="/bin/sleep", cwd=elsewhere)  # another node's server, as ps sees it
    pid = 0
    try:
        pidfile.write_text(f"{other.pid}\n")
        stopped = configure(tmp_path, "nats.yml", "nats-ansible", config, step="stop", ip=ip)
        assert stopped.ok, stopped.error
        assert other.poll() is None, "the stop killed another node's process"
        assert not pidfile.exists()
        pidfile.write_text(f"{other.pid}\n")
        started = configure(tmp_path, "nats.yml", "nats-ansible", config, step="start", ip=ip)
        assert started.ok, started.error
        pid = next(iter(servers_in(tmp_path / "nats")), 0)  # it started one of its own
        assert pid and pid != other.pid and other.poll() is None
        stopped = configure(tmp_path, "nats.yml", "nats-ansible", config, step="stop", ip=ip)  # and stops that one
        assert stopped.ok and not servers_in(tmp_path / "nats"), (stopped.error, servers_in(tmp_path / "nats"))
    finally:
        other.kill()
        other.wait()
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_redis_an_install_without_redis_server_fails_permanently_saying_what_to_install(tmp_path: Path) -> None:
    """It said `No such file or directory: b'redis-server'`, three times (the shell flavour: the same
    words, exit status 1, three times)."""
    farm = tmp_path / "bin"  # the host's commands but redis-server
    farm.mkdir()
    for tool in Path("/usr/bin").iterdir():
        if tool.name != "redis-server":
            (farm / tool.name).symlink_to(tool)
    missing = configure(tmp_path, "redis.yml", "redis-primary-ansible", {"redis": {}}, step="install", path=str(farm))
    assert not missing.ok and missing.permanent, missing
    assert "redis-server is not installed on n1 (the Debian package redis-server" in missing.error, missing.error
