"""The NATS install and configure of examples/catalog-real (shell flavour), run here with `sh` as a
node runs them: a config nats-server refuses never replaces the good one, and fails permanently (the
same config fails the same way: the planner rolls the job back without trying it again).
The whole cluster's story is tests/e2e/test_real.py's (make test-long)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import subprocess
from pathlib import Path
from typing import Any

from contracts.catalog import Action
from muster.bus.server import nats_server_binary
from muster.catalog.files import load_sources
from muster.runtime.real_demo import REAL_CATALOG
from services.provisioner.plugins.builtin.shell.automator import PERMANENT_EXIT


def run(home: Path, action: Action, settings: dict[str, Any], ip: str = "127.0.0.1", binary: str = "",
        config: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
    catalog = load_sources([REAL_CATALOG / "catalog.yaml"]).catalog
    script = str(catalog.services["nats"].provisioner.actions[action].fields["script"])
    if config is None:
        config = {"nats": {"binary": binary or nats_server_binary(), "routes": "nats-route://127.0.0.1:6222", "settings": settings}}
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "HOME": str(home), "MUSTER_IP": ip, "MUSTER_HOSTNAME": "n1",
           "MUSTER_CLUSTER_ID": "c1", "MUSTER_CONFIG": json.dumps(config)}
    return subprocess.run(["sh", "-c", script], env=env, cwd=home, capture_output=True, text=True, timeout=30)


def test_an_install_without_the_binary_fails_permanently_naming_the_setting(tmp_path: Path) -> None:
    """The template's default, `nats-server`, is on no PATH here: the install said "install:
    cannot stat 'nats-server'" and was tried three times."""
    missing = run(tmp_path, Action.INSTALL, {}, binary="nats-server-not-here")
    assert missing.returncode == PERMANENT_EXIT, (missing.returncode, missing.stderr)
    assert "no nats-server 'nats-server-not-here' on node n1 (nats.binary: a path, or a name on the node's PATH" in missing.stderr


def test_a_config_of_the_wrong_shape_fails_permanently_naming_the_setting(tmp_path: Path) -> None:
    """A walk's configure without `routes` (a config replaces the template's `nats` key as a whole)
    said `KeyError: 'routes'`, one of `{"nats": 5}` `TypeError: 'int' object is not subscriptable`,
    each three times."""
    binary = nats_server_binary()
    for action, config, said in (
        (Action.INSTALL, {}, "config: nats is null: an object (binary, routes, settings) is needed"),
        (Action.INSTALL, {"nats": 5}, "config: nats is 5: an object"),
        (Action.INSTALL, {"nats": {"binary": ""}}, 'config: nats.binary is ""'),
        (Action.CONFIGURE, {"nats": 5}, "config: nats is 5: an object"),
        (Action.CONFIGURE, {"nats": {"binary": binary, "routez": "x"}}, "config: nats.routes is null: the members' nats-route:// URLs"),
        (Action.CONFIGURE, {"nats": {"binary": binary, "routes": "", "settings": [1]}}, "config: nats.settings is [1]: an object"),
    ):
        out = run(tmp_path, action, {}, config=config)
        assert out.returncode == PERMANENT_EXIT and said in out.stderr, (config, out.returncode, out.stderr)
        assert "Traceback" not in out.stderr
    # Without `binary` the install looks for `nats-server`, as README says (it said KeyError: 'binary'); the
    # PATH here has none.
    out = run(tmp_path, Action.INSTALL, {}, config={"nats": {"routes": ""}})
    assert out.returncode == PERMANENT_EXIT and "no nats-server 'nats-server' on node n1" in out.stderr, out.stderr


def test_a_config_nats_server_refuses_fails_permanently_and_keeps_the_good_one(tmp_path: Path) -> None:
    assert run(tmp_path, Action.INSTALL, {}).returncode == 0
    good = run(tmp_path, Action.CONFIGURE, {"max_payload": 65536})
    assert good.returncode == 0, good.stderr
    conf = (tmp_path / "nats" / "nats.conf").read_text()
    assert "max_payload: 65536" in conf

    bad = run(tmp_path, Action.CONFIGURE, {"max_payload": "lots"})
    assert bad.returncode == PERMANENT_EXIT, (bad.returncode, bad.stderr)
    assert "nats.conf.new:4:1: interface conversion" in bad.stderr  # nats-server's own words, at the setting's line
    assert '(line 4: max_payload: "lots")' in bad.stderr, bad.stderr  # which names the setting (it said the line alone)
    assert (tmp_path / "nats" / "nats.conf").read_text() == conf


def test_a_stop_kills_only_this_nodes_own_server_not_what_has_its_old_pid_now(tmp_path: Path) -> None:
    """A nats-server killed by hand leaves its pidfile; pids are the host's and reused (32768 of
    them here), so the stop killed whatever ran under that number then: another node's server."""
    import signal

    (tmp_path / "nats").mkdir()
    elsewhere = tmp_path / "another-node"
    elsewhere.mkdir()
    other = subprocess.Popen(["nats-server", "60"], executable="/bin/sleep", cwd=elsewhere)  # another node's server, as ps sees it
    try:
        (tmp_path / "nats" / "nats.pid").write_text(f"{other.pid}\n")
        stopped = run(tmp_path, Action.STOP, {})
        assert stopped.returncode == 0, stopped.stderr
        assert other.poll() is None, "the stop killed another node's process"
        assert f"not running (pid {other.pid} is not this node's nats-server)" in stopped.stdout
        assert not (tmp_path / "nats" / "nats.pid").exists()
    finally:
        other.send_signal(signal.SIGKILL)
        other.wait()
    # Its own server (here a localhost node's: the host's network namespace, its own directory) it does stop.
    ip = _free_ip()
    assert run(tmp_path, Action.INSTALL, {}, ip).returncode == 0 and run(tmp_path, Action.CONFIGURE, {}, ip).returncode == 0
    started = run(tmp_path, Action.START, {}, ip)
    assert started.returncode == 0, started.stderr
    pid = int(started.stdout.split("started pid ")[1].split()[0])
    try:
        stopped = run(tmp_path, Action.STOP, {}, ip)
        assert stopped.stdout.strip() == f"stopped pid {pid}", (stopped, _log(tmp_path))
        assert not Path(f"/proc/{pid}/cmdline").exists() or b"nats-server" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _free_ip() -> str:
    """A loopback address whose client, monitoring and route ports (the catalog's 4222, 8222, 6222) are
    free: a server on 0.0.0.0 of one of them elsewhere on the host (another run's, a person's) made
    the started nats-server exit at once, and the test read a dead pid (session 35's first run)."""
    for _ in range(20):
        ip = f"127.{random.randrange(100, 250)}.{random.randrange(1, 250)}.{random.randrange(1, 250)}"
        try:
            for port in (4222, 8222, 6222):
                with socket.socket() as probe:
                    probe.bind((ip, port))
        except OSError:
            continue
        return ip
    raise AssertionError("no loopback address with 4222, 8222 and 6222 free: something on this host holds them on 0.0.0.0")


def _log(home: Path) -> str:
    log = home / "nats" / "nats.log"
    return log.read_text()[-2000:] if log.exists() else "(no nats.log)"


def test_a_start_whose_pidfile_names_another_nodes_server_starts_its_own(tmp_path: Path) -> None:
    """A nats-server killed by hand leaves its pidfile, and its pid may be another node's nats-server
    by the time the repair starts it: the start said `already running` and started nothing, and every
    repair rolled back on the status that followed."""
    import signal

    ip = _free_ip()
    assert run(tmp_path, Action.INSTALL, {}, ip).returncode == 0 and run(tmp_path, Action.CONFIGURE, {}, ip).returncode == 0
    elsewhere = tmp_path / "another-node"
    elsewhere.mkdir()
    other = subprocess.Popen(["nats-server", "60"], executable="/bin/sleep", cwd=elsewhere)  # another node's server, as ps sees it
    pid = 0
    try:
        (tmp_path / "nats" / "nats.pid").write_text(f"{other.pid}\n")
        started = run(tmp_path, Action.START, {}, ip)
        assert started.returncode == 0 and started.stdout.startswith("started pid "), (started.stdout, started.stderr)
        pid = int(started.stdout.split("started pid ")[1].split()[0])
        assert pid != other.pid and other.poll() is None
        # Its own: started in this node's directory (a cwd survives the exec of nohup and then of
        # nats-server, while /proc/<pid>/cmdline reads empty in the middle of an exec: session 35's
        # run failed on that, 2 runs in 25 beside a busy host).
        assert Path(f"/proc/{pid}/cwd").resolve() == (tmp_path / "nats").resolve(), _log(tmp_path)
    finally:
        other.send_signal(signal.SIGKILL)
        other.wait()
        if pid:
            run(tmp_path, Action.STOP, {}, ip)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
