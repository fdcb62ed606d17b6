"""`muster catalog delete` as a user runs it (#17.6), on a real nats-server: an entity nothing
uses goes (one `CatalogEntityDeleted`, shown by `history`); one a template or a live cluster
uses is refused with every reason and nothing is written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Literal

import pytest
from nats.aio.client import Client

from contracts import subjects
from contracts.events import ClusterLayoutChanged, ClusterRequested, ClusterStatusChanged
from contracts.layout import NodeSpec
from muster.bus.eventstore import Append, EventStore

from .conftest import muster

pytestmark = [pytest.mark.nats, pytest.mark.usefixtures("tracker")]

DEMO = Path(__file__).parents[3] / "muster" / "demo" / "catalog"
EXTRA = {"name": "extra", "description": "a service no template lists",
         "provisioner": {"actions": {"install": {"type": "simulated", "fields": {}}}}}


async def _catalog_events(nc: Client, tenant: str) -> list[str]:
    return [r.type for r in await EventStore(nc).read(f"muster.evt.{tenant}.catalog.>")]


async def _live_cluster(nc: Client, tenant: str, status: Literal["active", "deleted"] = "active") -> None:
    """A cluster with `extra` on a node, as the planner would have recorded it."""
    subject = subjects.cluster_events(tenant, "c-extra")
    events = [ClusterRequested(tenant=tenant, cluster_id="c-extra", name="uses-extra", template="hadoop-small",
                               provider="sim", job_id="j1"),
              ClusterLayoutChanged(cluster_id="c-extra", job_id="j1",
                                   nodes=[NodeSpec(id="n1", hardwaretype="medium", imagetype="ubuntu22", services=["extra"])]),
              ClusterStatusChanged(cluster_id="c-extra", job_id="j1", status=status)]
    store = EventStore(nc)
    await store.append(subject, [Append(e, msg_id=f"{tenant}-{status}-{i}") for i, e in enumerate(events)],
                       expect_last_seq=await store.last_seq(subject))


async def test_delete_what_nothing_uses_and_refuse_what_something_uses(nc: Client, nats_url: str, tenant: str,
                                                                       tmp_path: Path) -> None:
    cat = Path(shutil.copytree(DEMO, tmp_path / "catalog"))
    (cat / "services" / "extra.json").write_text(json.dumps(EXTRA))
    assert (await muster(nats_url, "catalog", "apply", str(cat), "--tenant", tenant)).code == 0

    provider = await muster(nats_url, "catalog", "delete", "provider", "sim", "--tenant", tenant)
    assert provider.code == 2
    assert "provider 'sim' not deleted: " in provider.stderr and "cluster template 'hadoop-small'" in provider.stderr
    await _live_cluster(nc, tenant)
    used = await muster(nats_url, "catalog", "delete", "service", "extra", "--tenant", tenant, "--json")
    assert used.code == 2 and json.loads(used.stdout.splitlines()[0]) == {
        "deleted": False, "kind": "services", "name": "extra",
        "reasons": ["live cluster 'uses-extra' (c-extra) uses it: a service on 1 node(s)"]}
    assert "CatalogEntityDeleted" not in await _catalog_events(nc, tenant)

    await _live_cluster(nc, tenant, status="deleted")  # the cluster is gone: nothing uses it any more
    gone = await muster(nats_url, "catalog", "delete", "service", "extra", "--tenant", tenant, "--by", "carol")
    assert gone.code == 0, gone.stderr
    assert f"deleted service 'extra' from the catalog of tenant {tenant!r}" in gone.stdout
    listing = await muster(nats_url, "catalog", "get", "services", "--tenant", tenant, "--json")
    assert "extra" not in {r["name"] for r in json.loads(listing.stdout)}
    history = await muster(nats_url, "catalog", "history", "extra", "--tenant", tenant, "--json")
    rows = [json.loads(line) for line in history.stdout.splitlines()]
    # With a token, `by` is its principal (the session's, tests/conftest.py): --by names only anonymous writers.
    assert [(r["version"], r["deleted"], r["by"]) for r in rows] == [(1, False, "test-system"), (1, True, "test-system")]
    again = await muster(nats_url, "catalog", "delete", "service", "extra", "--tenant", tenant)
    assert again.code == 2 and "there is no such entity" in again.stderr
