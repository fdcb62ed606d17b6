"""A user's expand and shrink of a cluster whose config names its members (#real, decision 0048):
`--wait` says which nodes keep a config written for the members before (it said nothing, and
the docs alone said to configure after an expand), `drift` lists them `stale`, and `repair`
writes them (configure and restart), a node at a time with `--rolling 1`."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from .conftest import muster

pytestmark = [pytest.mark.nats, pytest.mark.timeout(240), pytest.mark.usefixtures("fast")]
MEMBERS = json.dumps({"zk": {"quorum": "%join(map(ip.service.zookeeper-server,'$:2181'),',')%"}, "nodes": "%num.service.base%"})


async def test_an_expand_and_a_shrink_say_which_configs_are_stale_and_repair_writes_them(stack: Any, fresh_nats: str) -> None:
    created = await muster(fresh_nats, "cluster", "create", "members", "-t", "hadoop-small", "-n", "3", "--config", MEMBERS, "--wait")
    assert created.code == 0, created.stderr
    grown = await muster(fresh_nats, "cluster", "expand", "members", "-n", "4", "--wait")
    assert grown.code == 0, grown.stderr
    said = re.search(r"stale: the config of 3 node\(s\) \((n\d+, n\d+, n\d+)\) names the members before this change: "
                     r"`muster cluster repair members` writes them", grown.stdout)
    assert said, grown.stdout
    drift = json.loads((await muster(fresh_nats, "cluster", "drift", "members", "--json")).stdout)["drift"]
    assert {d["node"] for d in drift} == set(said.group(1).split(", ")) and {(d["observed"], d["repair"]) for d in drift} == {
        ("stale", "reconfigure")}
    shown = await muster(fresh_nats, "cluster", "drift", "members")
    assert "stale, should be running -> configure and restart it: its config was written for another config or other members" \
        in shown.stdout, shown.stdout
    # ... and the rolling way is the repair's own (it was `configure --restart --rolling 1`, which
    # restarts every node, drifted or not): a node at a time, its preview saying so.
    assert "`muster cluster repair members --rolling 1` does it a node at a time" in grown.stdout, grown.stdout
    dry = await muster(fresh_nats, "cluster", "repair", "members", "--rolling", "1", "--dry-run")
    assert dry.code == 0 and "rolling: 3 batches, each after the previous one is healthy" in dry.stdout, dry.stdout + dry.stderr
    repaired = await muster(fresh_nats, "cluster", "repair", "members", "--rolling", "1", "--wait")
    assert repaired.code == 0, repaired.stderr
    assert json.loads((await muster(fresh_nats, "cluster", "drift", "members", "--json")).stdout)["drift"] == []

    shrunk = await muster(fresh_nats, "cluster", "shrink", "members", "-n", "3", "--wait")
    assert shrunk.code == 0 and "stale: the config of 3 node(s)" in shrunk.stdout, shrunk.stdout + shrunk.stderr
