"""`muster catalog` against a real nats-server: apply is validated and all-or-nothing; get, diff
and history read the log; sensitive provider fields never reach it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from nats.aio.client import Client

from muster.bus.eventstore import EventStore
from muster.catalog.files import load_catalog
from muster.catalog.store import CatalogConflict, append_changes, plan_changes, read_history, read_state

from .conftest import muster

pytestmark = [pytest.mark.nats, pytest.mark.usefixtures("tracker")]

DEMO = Path(__file__).parents[3] / "muster" / "demo" / "catalog"


def _copy(tmp_path: Path) -> Path:
    return Path(shutil.copytree(DEMO, tmp_path / "catalog"))


def _edit(path: Path, **fields: object) -> None:
    body = json.loads(path.read_text())
    body.update(fields)
    path.write_text(json.dumps(body))


async def _count(nc: Client, tenant: str) -> int:
    return len(await EventStore(nc).read(f"muster.evt.{tenant}.catalog.>"))


async def test_apply_then_reapply_then_change(nc: Client, nats_url: str, tenant: str, tmp_path: Path) -> None:
    cat = _copy(tmp_path)
    # a real process for `catalog` (the other commands here run in the test's process: tests/cli_in_process.py)
    first = await muster(nats_url, "catalog", "apply", str(cat), "--tenant", tenant, process=True)
    assert first.code == 0, first.stderr
    assert f"applied 13 change(s) for tenant {tenant!r}" in first.stdout and "+ cluster template hadoop-small (v1)" in first.stdout

    again = await muster(nats_url, "catalog", "apply", str(cat), "--tenant", tenant, "--json")
    assert again.code == 0 and json.loads(again.stdout)["applied"] == 0
    assert await _count(nc, tenant) == 13

    template = cat / "clustertemplates" / "hadoop-small.json"
    _edit(template, description="bigger", constraints={**json.loads(template.read_text())["constraints"], "size": {"min": 2, "max": 80}})
    diff = await muster(nats_url, "catalog", "diff", str(cat), "--tenant", tenant)
    assert diff.code == 0, diff.stderr
    assert "~ cluster template hadoop-small (v2): constraints.size.max, description" in diff.stdout
    assert "1 change(s), 12 unchanged; apply would be accepted" in diff.stdout

    changed = await muster(nats_url, "catalog", "apply", str(template), "--tenant", tenant, "--by", "carol")
    assert changed.code == 0 and "applied 1 change(s)" in changed.stdout, changed.stderr

    history = await muster(nats_url, "catalog", "history", "hadoop-small", "--tenant", tenant, "--json")
    versions = [json.loads(line) for line in history.stdout.splitlines()]
    assert [(v["version"], v["by"], v["changed"]) for v in versions] == [
        # With a token, `by` is its principal (the session's, tests/conftest.py): --by names only anonymous writers.
        (1, "test-system", []), (2, "test-system", ["constraints.size.max", "description"])]
    assert versions[1]["entity"]["version"] == 2

    table = await muster(nats_url, "catalog", "history", "hadoop-small", "--tenant", tenant)
    assert "test-system" in table.stdout and "constraints.size.max" in table.stdout
    # its time as every human view says one (muster.times), not the log's ISO with microseconds
    # (walk of session 27: `2026-12-01T04:14:44.794192+00:00` beside `history`'s `... 04:14:44 UTC`)
    assert re.search(r"\b\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\b", table.stdout) and "+00:00" not in table.stdout, table.stdout

    listing = await muster(nats_url, "catalog", "get", "services", "--tenant", tenant, "--json")
    assert {r["name"] for r in json.loads(listing.stdout)} >= {"base", "hdfs-namenode"}
    one = await muster(nats_url, "catalog", "get", "template", "hadoop-small", "--tenant", tenant, "--resolved", "--json")
    assert json.loads(one.stdout)["constraints"]["size"]["max"] == 80 and json.loads(one.stdout)["version"] == 2


async def test_an_invalid_set_appends_nothing_and_names_file_entity_and_field(
    nc: Client, nats_url: str, tenant: str, tmp_path: Path
) -> None:
    cat = _copy(tmp_path)
    assert (await muster(nats_url, "catalog", "apply", str(cat), "--tenant", tenant)).code == 0
    before = await _count(nc, tenant)
    # One valid change and two bad ones: nothing of the three may land.
    _edit(cat / "services" / "base.json", description="a valid change")
    bad_service = cat / "services" / "hdfs-namenode.json"
    _edit(bad_service, dependencies={"runtime": {"requires": ["java"]}})
    bad_template = cat / "clustertemplates" / "hadoop-small.json"
    _edit(bad_template, defaults={**json.loads(bad_template.read_text())["defaults"], "hardwaretype": "tiny"})

    result = await muster(nats_url, "catalog", "apply", str(cat), "--tenant", tenant)
    assert result.code == 2 and "Traceback" not in result.stderr
    assert f"{bad_service}: service 'hdfs-namenode', field dependencies.runtime.requires: requires 'java'" in result.stderr
    assert f"{bad_template}: cluster template 'hadoop-small', field defaults.hardwaretype" in result.stderr
    assert "catalog not applied: 2 errors" in result.stderr
    assert await _count(nc, tenant) == before

    diff = await muster(nats_url, "catalog", "diff", str(cat), "--tenant", tenant, "--json")
    report = json.loads(diff.stdout)
    assert diff.code == 2 and report["valid"] is False and len(report["changes"]) == 3


async def test_an_extends_cycle_is_refused(nats_url: str, tenant: str, tmp_path: Path) -> None:
    cat = _copy(tmp_path)
    (cat / "clustertemplates" / "a.json").write_text(json.dumps({"name": "a", "extends": {"name": "b"}}))
    (cat / "clustertemplates" / "b.json").write_text(json.dumps({"name": "b", "extends": {"name": "a"}}))
    result = await muster(nats_url, "catalog", "apply", str(cat), "--tenant", tenant)
    assert result.code == 2 and "template cycle: a -> b -> a" in result.stderr


async def test_sensitive_provider_fields_are_refused_or_left_out(nc: Client, nats_url: str, tenant: str, tmp_path: Path) -> None:
    cat = _copy(tmp_path)
    provider = cat / "providers" / "sim.json"
    _edit(provider, provisioner={"region": "local", "api_password": "s3cret-value"})
    refused = await muster(nats_url, "catalog", "apply", str(cat), "--tenant", tenant)
    assert refused.code == 2
    assert "provider 'sim', field provisioner.api_password: looks like a credential" in refused.stderr
    assert "secrets file" in refused.stderr and "s3cret-value" not in refused.stderr + refused.stdout

    dropped = await muster(nats_url, "catalog", "apply", str(cat), "--tenant", tenant, "--drop-sensitive")
    assert dropped.code == 0, dropped.stderr
    assert "left out of provider 'sim': api_password" in dropped.stderr
    raw = json.dumps([v.entity for v in await read_history(EventStore(nc), tenant)])
    assert "s3cret-value" not in raw and "api_password" not in raw


async def test_a_concurrent_apply_is_refused_not_merged(nc: Client, tenant: str) -> None:
    store = EventStore(nc)
    demo = load_catalog(DEMO)
    stale = await read_state(store, tenant)
    changes = plan_changes(stale, demo)
    await append_changes(store, tenant, changes[:1], stale.last_seq, "first")
    with pytest.raises(CatalogConflict, match="changed while this apply was being checked"):
        await append_changes(store, tenant, changes[1:], stale.last_seq, "second")
    assert len(await read_history(store, tenant)) == 1


async def test_errors_are_one_sentence_and_an_exit_code(nats_url: str, tenant: str, tmp_path: Path) -> None:
    missing = await muster(nats_url, "catalog", "get", "services", "nope", "--tenant", tenant)
    assert missing.code == 2 and missing.stderr.strip() == (
        f"Error: no service 'nope' in the catalog of tenant {tenant!r} (or none you may read)")
    kind = await muster(nats_url, "catalog", "get", "gadgets", "--tenant", tenant)
    assert kind.code == 2 and "unknown kind 'gadgets'" in kind.stderr
    # KIND/NAME, as a grant's scope names an entity (`catalog:services/nope`): it was "unknown kind 'services/nope'".
    scoped = await muster(nats_url, "catalog", "get", "services/nope", "--tenant", tenant)
    assert scoped.code == 2 and scoped.stderr.strip() == missing.stderr.strip(), scoped.stderr
    apart = await muster(nats_url, "catalog", "delete", "services/nope", "x", "--tenant", tenant)
    assert apart.code == 2 and "give the kind and the name apart, `services nope`" in apart.stderr, apart.stderr
    unreachable = await muster(nats_url, "catalog", "get", "services", process=True, MUSTER_TRACKER_URL="http://127.0.0.1:9")
    assert unreachable.code == 3 and "cannot reach the tracker at http://127.0.0.1:9" in unreachable.stderr
    assert "Traceback" not in unreachable.stderr
    no_bus = await muster("nats://127.0.0.1:1", "catalog", "apply", str(DEMO), process=True)
    assert no_bus.code == 3 and "cannot reach NATS at nats://127.0.0.1:1" in no_bus.stderr
    offline = await muster(nats_url, "catalog", "validate", str(DEMO))
    assert offline.code == 0 and "13 entities: valid" in offline.stdout
