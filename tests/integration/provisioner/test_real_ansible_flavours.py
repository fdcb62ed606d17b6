"""The configure of examples/catalog-real's Ansible flavours, run by the real ansible-runner (on
this machine: a local connection, `muster_home` a temporary directory) and read as the ansible
automator reads it: a config the service itself refuses fails permanently (exit 78, as the shell
flavours' scripts), so the planner rolls back at once; a good one is put in place. The whole
cluster's story over SSH is tests/e2e/test_real.py's (make test-long)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from contracts.catalog import Action
from contracts.tasks import TaskOutcome
from muster.bus.server import nats_server_binary
from muster.runtime.real_demo import REAL_CATALOG
from services.provisioner.plugins.base import PERMANENT_EXIT
from services.provisioner.plugins.builtin.ansible.automator import _run, ansible_playbook, outcome
from services.provisioner.plugins.builtin.ansible.events import AnsibleLog

pytestmark = pytest.mark.timeout(300)


def play(tmp_path: Path, book: str, step: str, muster: dict[str, Any], login_home: Path | None = None) -> TaskOutcome:
    """`login_home`: no `muster_home`; the login's HOME is this (as a localhost node's is its directory)."""
    log = AnsibleLog()
    work = tmp_path / f"run-{step}-{len(list(tmp_path.glob('run-*')))}"
    work.mkdir()
    status, rc, raw = _run(dict(
        private_data_dir=str(work), playbook=str(REAL_CATALOG / "ansible" / book), quiet=True, event_handler=log.handle,
        inventory={"all": {"hosts": {"n1": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}},
        extravars={"step": step, **({"muster_home": str(tmp_path)} if login_home is None else {}), "muster": {
            "node": {"ip": "127.0.0.1", "hostname": "n1"}, "cluster_id": "c1", "exit_permanent": PERMANENT_EXIT, **muster}},
        envvars={"PATH": f"{Path(ansible_playbook()).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}", "ANSIBLE_NOCOLOR": "1",
                 "ANSIBLE_LOCAL_TEMP": str(work / "tmp"), **({"HOME": str(login_home)} if login_home is not None else {})},
    ))
    return outcome(f"{book} {step}", Action(step), status, rc, log, raw)


def test_a_config_nats_server_refuses_fails_permanently(tmp_path: Path) -> None:
    # (Its install: tests/unit/catalog/test_real_catalog_ansible.py, which ran this check too until
    # session 25.)
    (tmp_path / "nats").mkdir()
    shutil.copy(nats_server_binary(), tmp_path / "nats" / "nats-server")

    def nats(settings: dict[str, Any]) -> dict[str, Any]:
        return {"service": "nats-ansible", "config": {"nats": {"routes": "nats-route://127.0.0.1:6222", "settings": settings}}}

    good = play(tmp_path, "nats.yml", "configure", nats({"max_payload": 65536}))
    assert good.ok, good.error
    conf = (tmp_path / "nats" / "nats.conf").read_text()
    assert "max_payload: 65536" in conf
    bad = play(tmp_path, "nats.yml", "configure", nats({"max_payload": "lots"}))
    assert not bad.ok and bad.permanent, bad.error
    assert "nats.conf.new:4:1: interface conversion" in bad.error, bad.error  # nats-server's own words
    assert '(line 4: max_payload: "lots")' in bad.error, bad.error  # and the setting they are about
    assert bad.error.endswith("(exit status 78: permanent, not retried)"), bad.error
    assert (tmp_path / "nats" / "nats.conf").read_text() == conf  # the good one stays


def test_each_node_keeps_its_files_in_its_logins_home(tmp_path: Path) -> None:
    """Two localhost nodes are one host: the playbooks wrote both into the host's /root/nats (one
    config for two servers; the second node's server never answered). They use the login's home:
    a localhost node's directory, a namespace node's own /root."""
    for node in ("n1", "n2"):
        home = tmp_path / node
        home.mkdir()
        config = {"nats": {"binary": nats_server_binary(), "routes": f"nats-route://{node}:6222"}}
        for step in ("install", "configure"):
            done = play(tmp_path, "nats.yml", step, {"service": "nats-ansible", "config": config}, login_home=home)
            assert done.ok, done.error
        assert f"nats-route://{node}:6222" in (home / "nats" / "nats.conf").read_text()
    assert not (tmp_path / "nats").exists()


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="Debian's redis-server is not installed")
def test_a_config_redis_server_refuses_fails_permanently(tmp_path: Path) -> None:
    # A replica's (its `replicaof` written too); tests/unit/catalog/test_real_catalog_ansible.py ran
    # this check on it and this file on a primary until session 25.
    def redis(settings: dict[str, Any]) -> dict[str, Any]:
        return {"service": "redis-replica-ansible", "config": {"redis": {"primary": "10.0.0.1", "settings": settings}}}

    (tmp_path / "redis").mkdir()
    good = play(tmp_path, "redis.yml", "configure", redis({"maxmemory": "64mb"}))
    assert good.ok, good.error
    conf = (tmp_path / "redis" / "redis.conf").read_text()
    assert "maxmemory 64mb" in conf.splitlines() and "replicaof 10.0.0.1 6379" in conf.splitlines()
    bad = play(tmp_path, "redis.yml", "configure", redis({"maxmemory": "lots"}))
    assert not bad.ok and bad.permanent, bad.error
    assert "'maxmemory lots'" in bad.error and "argument must be a memory value" in bad.error, bad.error  # redis-server's own words
    assert bad.error.endswith("(exit status 78: permanent, not retried)"), bad.error
    assert (tmp_path / "redis" / "redis.conf").read_text() == conf
