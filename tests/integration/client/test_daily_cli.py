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
    # CONFIG as `cluster create` takes it (--config: a user coming from create typed it), once
    as_option = await muster(fresh_nats, "cluster", "configure", "daily", "--config", '{"a": 1}', "--if-version", str(shown["version"]))
    assert as_option.code == 2 and "(if_version): it changed since you looked" in as_option.stderr, as_option.stderr
    twice = await muster(fresh_nats, "cluster", "configure", "daily", '{"a": 1}', "--config", '{"a": 2}')
    assert twice.code == 2 and "CONFIG is given twice" in twice.stderr, twice.stderr

    # Without CONFIG: the cluster's config again (its macros expanded anew, as after an expand),
    # on the version just read; a schedule may not freeze today's config into itself.
    before = json.loads((await muster(fresh_nats, "cluster", "show", "daily", "--json")).stdout)
    early = await muster(fresh_nats, "cluster", "restart", "daily", "--dry-run")
    early_plan = next(line.split()[1] for line in early.stdout.splitlines() if line.startswith("plan ") and "apply" in line)
    again = await muster(fresh_nats, "cluster", "configure", "daily", "--restart", "--rolling", "1", "--wait")
    assert again.code == 0 and "succeeded" in again.stdout, again.stderr
    after = json.loads((await muster(fresh_nats, "cluster", "show", "daily", "--json")).stdout)
    assert after["config"] == before["config"] and after["version"] > before["version"]
    # A plan made before that change is refused, the cluster said by its name (an apply names none).
    late = await muster(fresh_nats, "cluster", "apply", early_plan)
    assert late.code == 2 and f"was made on cluster daily ({after['id']}) at version {before['version']}" in late.stderr, late.stderr
    sent = [r for r in await stack.store.read(f"muster.evt.{stack.tenant}.job.>") if r.type == "JobRequested"][-1]
    assert sent.event.request["config"] == before["config"] and sent.event.request["if_version"] == before["version"]
    frozen = await muster(fresh_nats, "schedule", "create", "nightly", "--cron", "0 3 * * *", "--", "cluster", "configure", "daily")
    assert frozen.code == 2 and "a scheduled configure needs its CONFIG" in frozen.stderr, frozen.stderr

    extended = await muster(fresh_nats, "cluster", "extend-lease", "daily", "--add", "30m")
    assert extended.code == 0 and "extended: it expires at" in extended.stdout, extended.stderr
    # the cluster as it was named, as refusals say it (it said the id alone)
    assert f"lease of cluster daily ({shown['id']}) extended: it expires at " in extended.stdout, extended.stdout
    too_far = await muster(fresh_nats, "cluster", "extend-lease", "daily", "--add", "3h")
    assert too_far.code == 2 and "(the template's step)" in too_far.stderr

    checked = await muster(fresh_nats, "cluster", "check", "daily", "--wait")
    assert checked.code == 0, checked.stderr
    assert re.search(r"zookeeper-server\s+running\s+running", checked.stdout) and "no drift" in checked.stdout
    # The services without a `status` action are named, not left out silently.
    assert "never observed (a check asks only the services with a `status` action): base on " in checked.stdout
    drift = json.loads((await muster(fresh_nats, "cluster", "drift", "daily", "--json")).stdout)
    assert drift["drift"] == [] and {o["state"] for o in drift["observed"]} == {"running"}
    assert "zookeeper-server" in {o["service"] for o in drift["observed"]}  # the demo's services all have a status action
    nothing = await muster(fresh_nats, "cluster", "repair", "daily")
    assert nothing.code == 2 and "cluster daily (" in nothing.stderr and "has no drift to repair" in nothing.stderr
