"""A cluster's console page by its name resolves as the commands and the API do (session 36's
walk): the live cluster of that name, else the last deleted one; and a task's page names its
cluster in its crumbs. `/ui/clusters/web` of a deleted
`web` answered "There is no cluster named 'web'" while `muster cluster show web` and
`/v1/replay?cluster=web` showed it."""

from __future__ import annotations

import html

import pytest

from contracts.commands import Accepted, CreateCluster, DeleteCluster
from contracts.events import JobSucceeded
from muster.readmodel.locations import cluster_key

from .conftest import TENANT, Tracked

pytestmark = pytest.mark.nats


async def _made(tracked: Tracked, name: str) -> tuple[str, str]:
    reply = await tracked.client.send(TENANT, CreateCluster(name=name, template="hadoop-small", nodes=2))
    assert isinstance(reply, Accepted), reply
    assert isinstance(await tracked.client.wait(reply.job_id, timeout=60), JobSucceeded)
    await tracked.indexed_final(reply.job_id)
    return reply.job_id, reply.cluster_id


async def _deleted(tracked: Tracked, cluster_id: str) -> None:
    reply = await tracked.client.send(TENANT, DeleteCluster(cluster_id=cluster_id))
    assert isinstance(reply, Accepted), reply
    assert isinstance(await tracked.client.wait(reply.job_id, timeout=60), JobSucceeded)
    index = tracked.tracker.index
    assert index is not None

    def gone() -> bool:
        record = index.mirror.get(cluster_key(TENANT, cluster_id))
        return record is not None and record.get("status") == "deleted"

    await tracked.until(gone)


async def test_a_deleted_clusters_name_opens_its_page_and_a_new_one_of_the_name_wins(tracked: Tracked) -> None:
    job, first = await _made(tracked, "named-web")
    # A task's page names its cluster in its crumbs as the job's page does (it said "Cluster").
    task = await (await tracked.http.get(f"/ui/jobs/{job}/tasks/n1000.create")).text()
    assert f'<a href="/ui/clusters/{first}" title="{first}">named-web</a> / <a href="/ui/jobs/{job}">' in task
    await _deleted(tracked, first)
    resp = await tracked.http.get("/ui/clusters/named-web", allow_redirects=False)
    assert resp.status in (302, 303) and resp.headers["Location"] == f"/ui/clusters/{first}", (resp.status, await resp.text())
    page = await tracked.http.get("/ui/clusters/named-web")
    assert page.status == 200 and "deleted" in await page.text()
    replay = await (await tracked.http.get("/v1/replay", params={"cluster": "named-web"})).json()
    assert replay["cluster"]["id"] == first  # the API's answer for the same name
    _, second = await _made(tracked, "named-web")  # the name again: the live one is meant now
    resp = await tracked.http.get("/ui/clusters/named-web", allow_redirects=False)
    assert resp.headers["Location"] == f"/ui/clusters/{second}"
    missing = await tracked.http.get("/ui/clusters/named-nobody")
    assert missing.status == 404 and "There is no cluster named 'named-nobody' in tenant default." in html.unescape(await missing.text())
