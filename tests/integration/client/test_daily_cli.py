"""The daily commands as a user runs them (#17): a saved plan applied, a rolling restart,
`--if-version`, a lease shown and extended, a check with the drift printed."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from contracts.catalog import Catalog
from muster.catalog.store import apply_catalog, read_catalog

from .conftest import muster

pytestmark = [pytest.mark.nats, pytest.mark.timeout(240), pytest.mark.usefixtures("fast")]
Stack = Any


async def _leased_and_checked(stack: Stack) -> None:
    catalog = await read_catalog(stack.store, stack.tenant)
    zk = catalog.services["zookeeper-server"].model_dump()
    zk["provisioner"]["actions"]["status"] = {"type": "simulated", "fields": {}}
    template = catalog.clustertemplates["hadoop-small"].model_dump()
    template["administration"] = {"leaseduration": {"initial": "2h", "max": "6h", "step": "1h"}}
    await apply_catalog(stack.store, stack.tenant, Catalog.model_validate(
        {"services": {"zookeeper-server": zk}, "clustertemplates": {"hadoop-small": template}}))


async def test_the_daily_commands(stack: Stack, fresh_nats: str) -> None:
    await _leased_and_checked(stack)
    created = await muster(fresh_nats, "cluster", "create", "daily", "-t", "hadoop-small", "-n", "3", "--wait")
    assert created.code == 0, created.stderr
    shown = json.loads((await muster(fresh_nats, "cluster", "show", "daily", "--json")).stdout)
    assert shown["expires_at"] and shown["version"] > 1

    dry = await muster(fresh_nats, "cluster", "restart", "daily", "--rolling", "1", "--dry-run")
    assert dry.code == 0, dry.stderr
    assert "rolling: 3 batches, each after the previous one is healthy; 0 node(s) may fail" in dry.stdout
    plan_id = next(line.split()[1] for line in dry.stdout.splitlines() if line.startswith("plan ") and "apply" in line)
    applied = await muster(fresh_nats, "cluster", "apply", plan_id, "--wait")
    assert applied.code == 0 and "apply accepted" in applied.stdout, applied.stderr

    stale = await muster(fresh_nats, "cluster", "configure", "daily", '{"a": 1}', "--if-version", str(shown["version"]))
    assert stale.code == 2 and "(if_version): it changed since you looked" in stale.stderr

    extended = await muster(fresh_nats, "cluster", "extend-lease", "daily", "--add", "30m")
    assert extended.code == 0 and "extended: it expires at" in extended.stdout, extended.stderr
    too_far = await muster(fresh_nats, "cluster", "extend-lease", "daily", "--add", "3h")
    assert too_far.code == 2 and "(the template's step)" in too_far.stderr

    checked = await muster(fresh_nats, "cluster", "check", "daily", "--wait")
    assert checked.code == 0, checked.stderr
    assert re.search(r"zookeeper-server\s+running\s+running", checked.stdout) and "no drift" in checked.stdout
    drift = json.loads((await muster(fresh_nats, "cluster", "drift", "daily", "--json")).stdout)
    assert drift["drift"] == [] and {o["state"] for o in drift["observed"]} == {"running"}
    assert "zookeeper-server" in {o["service"] for o in drift["observed"]}  # the demo's services all have a status action
    nothing = await muster(fresh_nats, "cluster", "repair", "daily")
    assert nothing.code == 2 and "has no drift to repair" in nothing.stderr
