"""The Redis configure of examples/catalog-real (shell flavour), run here with `sh` as a node runs
it: the config's `redis.settings` reach redis.conf, and a bad setting is refused by redis-server
itself before it replaces the good file (the running server keeps its config; the job rolls back).
The whole cluster's story is tests/e2e/test_real.py's (make test-long)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from contracts.catalog import Action
from muster.catalog.files import load_sources
from muster.runtime.real_demo import REAL_CATALOG

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="Debian's redis-server is not installed")


def script(action: Action) -> str:
    catalog = load_sources([REAL_CATALOG / "catalog.yaml"]).catalog
    return str(catalog.services["redis-replica"].provisioner.actions[action].fields["script"])


def configure(home: Path, settings: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    (home / "redis").mkdir(exist_ok=True)
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "HOME": str(home), "MUSTER_IP": "127.0.0.1",
           "MUSTER_SERVICES": "redis-replica", "MUSTER_CONFIG": json.dumps({"redis": {"primary": "10.0.0.1", "settings": settings}})}
    return subprocess.run(["sh", "-c", script(Action.CONFIGURE)], env=env, cwd=home, capture_output=True, text=True, timeout=30)


def test_settings_reach_redis_conf_and_a_bad_one_never_replaces_the_good_file(tmp_path: Path) -> None:
    good = configure(tmp_path, {"maxmemory": "64mb", "lazyfree-lazy-eviction": True})
    assert good.returncode == 0, good.stderr
    conf = (tmp_path / "redis" / "redis.conf").read_text().splitlines()
    assert {"maxmemory 64mb", "lazyfree-lazy-eviction yes", "replicaof 10.0.0.1 6379", "appendonly yes"} <= set(conf)

    bad = configure(tmp_path, {"maxmemory": "lots"})
    assert bad.returncode != 0
    assert "'maxmemory lots'" in bad.stderr and "argument must be a memory value" in bad.stderr  # redis-server's own words
    assert (tmp_path / "redis" / "redis.conf").read_text().splitlines() == conf


def test_a_stop_keeps_the_data_a_restarted_primary_comes_back_with() -> None:
    """Without persistence a restarted primary comes back empty and its replicas follow it; the stop
    must not throw the data away either."""
    assert "nosave" not in script(Action.STOP)
