"""The status of examples/catalog-real's services says the same words in both flavours (README: what
`muster cluster drift` shows under a failed or stopped service), asked of the same server on this
host: the shell scripts with `sh`, the playbooks with ansible-runner (a local connection). The shell
flavour said `replica, link to primary down` where README and the playbook say `replica of
10.213.0.2, link down`, and the playbook's NATS `running with 3 members` named no one."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from contracts.catalog import Action
from muster.bus.server import nats_server_binary
from muster.catalog.files import load_sources
from muster.runtime.real_demo import REAL_CATALOG
from services.provisioner.plugins.builtin.shell.automator import LSB_STATE
from tests.unit.catalog.test_real_catalog_ansible import configure as ansible_step


def shell(service: str, action: Action, home: Path, ip: str, config: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    script = load_sources([REAL_CATALOG / "catalog.yaml"]).catalog.services[service].provisioner.actions[action].fields["script"]
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "HOME": str(home), "MUSTER_IP": ip, "MUSTER_HOSTNAME": f"n-{ip}",
           "MUSTER_CLUSTER_ID": "c1", "MUSTER_SERVICES": service, "MUSTER_CONFIG": json.dumps(config)}
    return subprocess.run(["sh", "-c", str(script)], env=env, cwd=home, capture_output=True, text=True, timeout=30)


def both(service: str, home: Path, ip: str, config: dict[str, Any]) -> tuple[tuple[str, str], tuple[str, str]]:
    """(state, detail) from the shell flavour's status, then the Ansible flavour's, of the server on `ip`."""
    out = shell(service, Action.STATUS, home, ip, config)
    asked = ansible_step(home, "nats.yml" if service == "nats" else "redis.yml", f"{service}-ansible", config, step="status", ip=ip)
    assert asked.ok, asked.error
    return (LSB_STATE.get(out.returncode, "unknown"), out.stdout.strip()), (asked.result["state"], asked.result["detail"])


@contextmanager
def serving(argv: list[str], ready: str) -> Iterator[None]:
    """A server of this test, in the foreground: ready once it writes `ready` (read from its pipe)."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as server:
        try:
            assert server.stdout is not None
            for line in server.stdout:
                if ready in line:
                    break
            else:
                raise AssertionError(f"{argv[0]} ended before it was ready (exit status {server.wait()})")
            yield
        finally:
            server.kill()


def loopback() -> str:
    return f"127.{random.randrange(100, 250)}.{random.randrange(1, 250)}.{random.randrange(1, 250)}"


def test_nats_says_the_same_in_both_flavours(tmp_path: Path) -> None:
    ip = loopback()
    config = {"nats": {"binary": nats_server_binary(), "routes": ""}}
    for action in (Action.INSTALL, Action.CONFIGURE):
        done = shell("nats", action, tmp_path, ip, config)
        assert done.returncode == 0, done.stderr
    with serving([nats_server_binary(), "-c", str(tmp_path / "nats" / "nats.conf")], "Server is ready"):
        by_shell, by_ansible = both("nats", tmp_path, ip, config)
        assert by_shell == by_ansible == ("running", f"n-{ip} with 1 members ()"), (by_shell, by_ansible)
    by_shell, by_ansible = both("nats", tmp_path, ip, config)
    assert by_shell == by_ansible, (by_shell, by_ansible)  # (ansible's uri said `Status code was -1 and not [200]: ...` first)
    assert by_shell[0] == "stopped" and by_shell[1].startswith(f"nats on {ip} does not answer: "), by_shell


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="Debian's redis-server is not installed")
def test_redis_says_the_same_in_both_flavours(tmp_path: Path) -> None:
    primary, replica, nowhere = loopback(), loopback(), loopback()
    for ip, role in ((primary, []), (replica, ["--replicaof", nowhere, "6379"])):
        with serving(["redis-server", "--bind", ip, "--port", "6379", "--save", "", "--dir", str(tmp_path), *role],
                     "Ready to accept connections"):
            service = "redis-replica" if role else "redis-primary"
            by_shell, by_ansible = both(service, tmp_path, ip, {"redis": {"primary": nowhere}})
            said = ("failed", f"replica of {nowhere}, link down") if role else ("running", "primary with 0 replicas")
            assert by_shell == by_ansible == said, (by_shell, by_ansible)
    by_shell, by_ansible = both("redis-primary", tmp_path, primary, {"redis": {"primary": nowhere}})
    assert by_shell == by_ansible, (by_shell, by_ansible)
    assert by_shell[0] == "stopped" and by_shell[1].startswith(f"redis on {primary} does not answer: "), by_shell
