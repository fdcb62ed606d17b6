"""Issue #18.7: a create for a tenant that no live provisioner serves was accepted silently and
its tasks waited 900 s. It is still accepted (one may register any moment), but the answer,
the job's status (`muster status`, `muster watch`, the console's job page) and /metrics say so."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime

from contracts.commands import Accepted, CreateCluster
from contracts.tasks import ProvisionerInfo
from muster.bus.eventstore import EventStore
from muster.catalog.files import load_catalog
from muster.catalog.store import apply_catalog
from services.provisioner.presence import MAX_TTL_S, Presence, presence_bucket
from tests import cli_in_process

from .conftest import DEMO_CATALOG, Tracked

LONELY = "lonely"


async def test_a_job_nobody_serves_is_accepted_and_every_view_says_why(tracked: Tracked) -> None:
    await apply_catalog(EventStore(tracked.client.nc), LONELY, load_catalog(DEMO_CATALOG))
    reply = await tracked.client.send(LONELY, CreateCluster(name="c1", template="hadoop-small", nodes=2))
    assert isinstance(reply, Accepted), reply
    assert reply.warnings and f"no live provisioner serves tenant '{LONELY}' (class 'default')" in reply.warnings[0]
    # (this fixture's workers register no presence: nothing of the class runs, so how to start one)
    start = (f"no provisioner of class 'default' is running: a super admin starts one with muster user create prov-default "
             f"--role service --service provisioner --tenant {LONELY} --save prov-default.cred, muster grant prov-default "
             f"execute --tenant {LONELY} --scope queue:default, then MUSTER_CREDENTIALS=prov-default.cred muster provisioner "
             "--class default")
    assert reply.warnings[0].endswith(start), reply.warnings

    headers = {"X-Muster-Tenant": LONELY}
    async with asyncio.timeout(60):  # until its first tasks are queued (the solver answered)
        async for _ in tracked.client.events(reply.job_id, LONELY):
            body = await (await tracked.http.get(f"/v1/jobs/{reply.job_id}", headers=headers)).json()
            if body["counts"].get("queued"):
                break
    assert body["state"] == "running"
    # The commands to paste (it said `muster grant <provisioner> ... --scope queue:<class>`,
    # placeholders the reader had to resolve, and no way to start a provisioner).
    assert body["warnings"] == [f"no live provisioner serves tenant '{LONELY}' (class 'default'): {body['counts']['queued']} "
                                f"queued task(s) wait until one registers; {start}"]
    # The console's job page too.
    page = await (await tracked.http.get(f"/ui/jobs/{reply.job_id}", headers={"Cookie": f"muster_tenant={LONELY}"})).text()
    assert 'data-testid="job-unserved"' in page and f"no live provisioner serves tenant &#39;{LONELY}&#39;" in page, page
    # `muster watch` says it before following the job (which then shows queued tasks, and waits).
    watched = await cli_in_process.ran(["watch", reply.job_id, "--tenant", LONELY, "--nats-url", tracked.url, "--timeout", "1"],
                                       os.environ, 60, catch_exceptions=False)
    assert watched.exit_code == 3, watched.output
    assert f"warning: no live provisioner serves tenant '{LONELY}'" in watched.output, watched.output
    # A scrape gathers the planners' answers for 0.2 s: on a loaded machine (the planner runs in
    # this test's event loop) one can miss them, so up to three scrapes.
    for _ in range(3):
        text = await (await tracked.http.get("/metrics")).text()
        lines = [ln for ln in text.splitlines() if ln.startswith("muster_tasks_unserved{")]
        if lines:
            break
    assert len(lines) == 1, text
    assert f'tenant="{LONELY}"' in lines[0] and 'class="default"' in lines[0] and float(lines[0].rsplit(" ", 1)[1]) > 0


async def test_a_served_tenant_whose_class_nobody_serves_is_warned_of_in_the_status_too(tracked: Tracked) -> None:
    """Walk of session 22: with a provisioner of class `default` serving the tenant, a job whose
    tasks are queued on class `gpu` got the warning at accept (and in the dry run) but not in its
    status (HTTP, `muster status`, the console's job page): the tracker checked the tenant only."""
    catalog = load_catalog(DEMO_CATALOG)
    sim = catalog.providers["sim"]
    catalog.providers["sim"] = sim.model_copy(update={"provisionerclass": "gpu"})
    await apply_catalog(EventStore(tracked.client.nc), LONELY, catalog)
    info = ProvisionerInfo(id="prov-lonely", session="s1", host="here", pid=1, capacity=1, provisioner_class="default",
                           tenants=[LONELY], started_at=datetime.now(UTC))
    presence = Presence(tracked.client.nc, tracked.store, info, lambda: (0, 0, False), ttl_s=MAX_TTL_S)
    await presence_bucket(tracked.client.nc.jetstream())
    await presence.refresh()

    reply = await tracked.client.send(LONELY, CreateCluster(name="c1", template="hadoop-small", nodes=2))
    assert isinstance(reply, Accepted), reply
    assert reply.warnings and f"no live provisioner serves tenant '{LONELY}' (class 'gpu')" in reply.warnings[0]
    headers = {"X-Muster-Tenant": LONELY}
    async with asyncio.timeout(60):
        async for _ in tracked.client.events(reply.job_id, LONELY):
            body = await (await tracked.http.get(f"/v1/jobs/{reply.job_id}", headers=headers)).json()
            if body["counts"].get("queued"):
                break
    assert body["state"] == "running"
    assert len(body["warnings"]) == 1, body["warnings"]
    assert body["warnings"][0].startswith(f"no live provisioner serves tenant '{LONELY}' (class 'gpu'): "), body["warnings"]
    assert "no provisioner of class 'gpu' is running" in body["warnings"][0]
    page = await (await tracked.http.get(f"/ui/jobs/{reply.job_id}", headers={"Cookie": f"muster_tenant={LONELY}"})).text()
    assert 'data-testid="job-unserved"' in page and "(class &#39;gpu&#39;)" in page, page
    shown = await cli_in_process.ran(["status", reply.job_id, "--tenant", LONELY, "--nats-url", tracked.url], os.environ, 60,
                                     catch_exceptions=False)
    assert f"warning: no live provisioner serves tenant '{LONELY}' (class 'gpu')" in shown.output, shown.output
