"""The NATS install and configure of examples/catalog-real (shell flavour), run here with `sh` as a
node runs them: a config nats-server refuses never replaces the good one, and fails permanently (the
same config fails the same way: the planner rolls the job back without trying it again).
The whole cluster's story is tests/e2e/test_real.py's (make test-long)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from contracts.catalog import Action
from muster.bus.server import nats_server_binary
from muster.catalog.files import load_sources
from muster.runtime.real_demo import REAL_CATALOG
from services.provisioner.plugins.builtin.shell.automator import PERMANENT_EXIT


def run(home: Path, action: Action, settings: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    catalog = load_sources([REAL_CATALOG / "catalog.yaml"]).catalog
    script = str(catalog.services["nats"].provisioner.actions[action].fields["script"])
    config = {"nats": {"binary": nats_server_binary(), "routes": "nats-route://127.0.0.1:6222", "settings": settings}}
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "HOME": str(home), "MUSTER_IP": "127.0.0.1", "MUSTER_HOSTNAME": "n1",
           "MUSTER_CLUSTER_ID": "c1", "MUSTER_CONFIG": json.dumps(config)}
    return subprocess.run(["sh", "-c", script], env=env, cwd=home, capture_output=True, text=True, timeout=30)


def test_a_config_nats_server_refuses_fails_permanently_and_keeps_the_good_one(tmp_path: Path) -> None:
    assert run(tmp_path, Action.INSTALL, {}).returncode == 0
    good = run(tmp_path, Action.CONFIGURE, {"max_payload": 65536})
    assert good.returncode == 0, good.stderr
    conf = (tmp_path / "nats" / "nats.conf").read_text()
    assert "max_payload: 65536" in conf

    bad = run(tmp_path, Action.CONFIGURE, {"max_payload": "lots"})
    assert bad.returncode == PERMANENT_EXIT, (bad.returncode, bad.stderr)
    assert "nats.conf.new:4:1: interface conversion" in bad.stderr  # nats-server's own words, at the setting's line
    assert (tmp_path / "nats" / "nats.conf").read_text() == conf
