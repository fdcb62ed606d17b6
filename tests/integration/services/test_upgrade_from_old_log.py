"""A log an older muster wrote keeps working after an upgrade: today's services, started over
the streams a deployment of an older commit left (its job stopped mid-way by a Ctrl-C of
`muster up`), read its clusters as it left them, finish its job, replay its past, apply the plan
it saved and run new operations on its clusters (docs/bus.md, "Upgrades")."""

from __future__ import annotations

from typing import Any

import pytest

from contracts import subjects
from contracts.commands import Accepted, ApplyPlan, ExpandCluster, Rejected
from contracts.events import JobSucceeded
from muster.tracker_client import TENANT_HEADER

pytestmark = [pytest.mark.nats, pytest.mark.timeout(120)]
Stack = Any
TENANT = "default"


async def _get(stack: Stack, path: str, **query: Any) -> Any:
    # (the tenant in its header: a `tenant` parameter, which the routes never read, is refused now)
    response = await stack.http.get(path, params=query, headers={TENANT_HEADER: TENANT})
    assert response.status == 200, (path, response.status, await response.text())
    return await response.json()


def _same(now: dict[str, Any], then: dict[str, Any], keys: tuple[str, ...]) -> None:
    assert {k: now.get(k) for k in keys} == {k: then[k] for k in keys}


@pytest.mark.parametrize("stack", [{"old_log": "3d1ad96"}, {"old_log": "319c62f"}], indirect=True, ids=["3d1ad96", "319c62f"])
async def test_an_old_log_keeps_working(stack: Stack, request: pytest.FixtureRequest) -> None:
    old = request.node.old_log
    alpha, stopped, plan = old.expected["alpha"], old.expected["stopped"], old.expected["plan"]

    # The clusters as the old code left them: the finished one whole, the stopped one mid-create.
    shown = alpha["shown"]
    now = await stack.client.cluster(alpha["cluster_id"], TENANT)
    assert (now.name, now.status, now.version, now.config) == (shown["name"], shown["status"], shown["version"], shown["config"])
    detail = await _get(stack, f"/v1/clusters/{alpha['cluster_id']}")
    _same(detail, shown, ("name", "status", "version", "template", "provider", "job_id"))
    assert [(n["id"], n["hostname"], n["services"]) for n in detail["nodes"]] == \
        [(n["id"], n["hostname"], n["services"]) for n in shown["nodes"]]
    left = await _get(stack, "/v1/replay", cluster=stopped["cluster_id"], seq=old.last_seq)
    own = old.of(subjects.cluster_events(TENANT, stopped["cluster_id"]))
    assert left["cluster"]["version"] == int(dict(own[-1]["headers"])["Muster-Version"])
    assert left["cluster"]["status"] == "pending", left["cluster"]  # not yet made
    [job] = left["jobs"]
    completed = [m for m in old.events if stopped["job_id"] in m["subject"] and dict(m["headers"])["Muster-Type"] == "TaskCompleted"]
    assert (job["state"], job["counts"].get("succeeded")) == ("running", len(completed)), job
    assert 0 < len(completed) < job["tasks_total"]

    # The job stopped mid-way is taken up and finishes.
    assert isinstance(await stack.client.wait(stopped["job_id"], TENANT, timeout=60), JobSucceeded)
    done = await stack.client.cluster(stopped["cluster_id"], TENANT)
    assert (done.status, len(done.nodes)) == ("active", 10)

    # A point of the old part replays as the old code replayed it.
    then = alpha["replayed_after_create"]
    replayed = await _get(stack, "/v1/replay", cluster=alpha["cluster_id"], seq=alpha["seq_after_create"])
    assert replayed["as_of"]["seq"] == then["as_of"]["seq"]
    _same(replayed["cluster"], then["cluster"], ("status", "version", "layout", "template", "job_id", "name", "seq"))
    assert [(n["id"], n["hostname"]) for n in replayed["cluster"]["nodes"]] == \
        [(n["id"], n["hostname"]) for n in then["cluster"]["nodes"]]
    assert [(j["id"], j["state"], j["counts"]) for j in replayed["jobs"]] == [(j["id"], j["state"], j["counts"]) for j in then["jobs"]]

    # The plan the old code saved is answered: run as it was shown, or refused as stale (the
    # catalog, the cluster's version, or a plan today's planner derives otherwise), never an error.
    reply = await stack.client.send(TENANT, ApplyPlan(plan_id=plan["plan_id"]))
    if isinstance(reply, Accepted):
        assert isinstance(await stack.client.wait(reply.job_id, TENANT, timeout=60), JobSucceeded)
        assert len((await stack.client.cluster(alpha["cluster_id"], TENANT)).nodes) == 5
    else:
        assert isinstance(reply, Rejected) and reply.code == "stale" and plan["plan_id"] in reply.reason, reply

    # A new operation on an old cluster.
    before = await stack.client.cluster(alpha["cluster_id"], TENANT)
    more = await stack.client.send(TENANT, ExpandCluster(cluster_id=alpha["cluster_id"], nodes=len(before.nodes) + 1))
    assert isinstance(more, Accepted), more
    assert isinstance(await stack.client.wait(more.job_id, TENANT, timeout=60), JobSucceeded)
    after = await stack.client.cluster(alpha["cluster_id"], TENANT)
    assert len(after.nodes) == len(before.nodes) + 1 and after.version > before.version
