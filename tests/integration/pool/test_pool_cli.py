"""`muster pool ...` as an administrator runs it, against a pool service."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml
from pool_env import PoolEnv, muster, real_host_key

pytestmark = pytest.mark.nats


async def test_an_administrator_manages_a_pool_from_the_command_line(env: PoolEnv, tmp_path: Path) -> None:
    keys = [real_host_key() for _ in range(3)]
    hosts_file = tmp_path / "hosts.yaml"
    hosts_file.write_text(yaml.safe_dump([
        {"id": f"node{i}", "address": f"10.0.0.{i}", "host_key": keys[i], "cpu": 8, "memory": "16G", "labels": ["ssd"]}
        for i in range(3)
    ]))
    # a real process for `pool` (the other commands here run in the test's process: tests/cli_in_process.py)
    added = await muster(env.url, "pool", "add-hosts", "lab", str(hosts_file), process=True)
    assert added.code == 0, added.stderr
    assert "3 hosts registered in pool lab" in added.stdout

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump([{"id": "x", "address": "10.0.0.9", "host_key": keys[0], "memory": "lots"}]))
    again, refused = await asyncio.gather(muster(env.url, "pool", "add-hosts", "lab", str(hosts_file)),
                                          muster(env.url, "pool", "add-hosts", "lab", str(bad)))
    assert again.code == 2 and "refused: already in pool lab: node0, node1, node2" in again.stderr
    assert refused.code == 2 and "host 1 (x): properties.memory" in refused.stderr and "is not a size" in refused.stderr

    moved = tmp_path / "moved.yaml"
    moved.write_text(yaml.safe_dump([{"id": "node2", "address": "10.0.1.2", "host_key": keys[2], "cpu": 8}]))
    frozen = await muster(env.url, "pool", "add-hosts", "lab", str(moved))
    assert "ambiguous, lent to nobody until resolved: node2" in frozen.stdout

    configured = await muster(env.url, "pool", "configure", "lab", "--priority", "gold=3", "--max-nodes", "gold=2",
                              "--job-limit", "2", "--default-priority", "2")
    assert configured.code == 0, configured.stderr
    shown, table = await asyncio.gather(muster(env.url, "pool", "show", "lab", "--json"), muster(env.url, "pool", "show", "lab"))
    view = json.loads(shown.stdout)
    assert view["terms"]["tenants"]["gold"] == {"priority": 3, "max_nodes": 2, "max_clusters": None}
    assert view["terms"]["job_limit"] == 2
    assert [(h["id"], h["ambiguous"]) for h in view["hosts_detail"]] == [("node0", False), ("node1", False), ("node2", True)]
    assert "ambiguous: 2 registrations" in table.stdout and "tenant gold: priority 3, max nodes 2\n" in table.stdout
    assert "; policy urgency-x-priority, default priority 2, at most 2 hosts per job\n" in table.stdout, table.stdout
    # In a pipe: plain columns with every value in full, as `cluster list` prints them (for grep and awk).
    rows = [line.split() for line in table.stdout.splitlines()]
    assert ["HOST", "ADDRESS", "STATE", "CPU", "MEMORY", "LABELS", "HELD", "BY", "NOTE"] in rows, table.stdout
    assert ["node0", "10.0.0.0:22", "unassigned", "8", "16384M", "ssd"] in rows, table.stdout

    resolved = await muster(env.url, "pool", "resolve", "lab", "node2", "--use", "2")
    assert resolved.code == 0 and "no longer ambiguous: node2" in resolved.stdout
    reset, removed, unknown = await asyncio.gather(
        muster(env.url, "pool", "reset", "lab", "node1"),
        muster(env.url, "pool", "remove-host", "lab", "node0", "--reason", "retired"),
        muster(env.url, "pool", "show", "nowhere"),
    )
    assert reset.code == 2 and "node1 is unassigned; only a host in error can be reset" in reset.stderr
    assert removed.code == 0, removed.stderr
    # A missing name, with the names there are, not a `refused:` (walk of session 27: it read like a permission problem).
    assert unknown.code == 2 and "no pool 'nowhere': the pools are lab" in unknown.stderr, unknown.stderr
    assert "refused" not in unknown.stderr and "there is no pool" not in unknown.stderr
    listing = json.loads((await muster(env.url, "pool", "list", "--json")).stdout)
    assert [(p["pool"], p["hosts"], p["free"]) for p in listing] == [("lab", 2, 2)]
    # `pool configure` of a pool nobody made makes it (it reads the terms first, and a missing pool is no error there).
    fresh = await muster(env.url, "pool", "configure", "spare", "--policy", "fifo")
    assert fresh.code == 0 and "pool spare is new: made with policy fifo" in fresh.stdout, fresh.stderr
