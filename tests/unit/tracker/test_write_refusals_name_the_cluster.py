"""A write the tracker refuses for a missing grant names the cluster as the CLI does, by name and
id (docs/security.md: `stop rejected: alice has no execute permission on cluster web (…) of
tenant acme`). Found by a tenant's walk (session 24): `POST /v1/clusters/{id}/stop` answered
`... on cluster 6bfc8503-... of tenant acme`, the id alone, where the CLI said `cluster c2 (...)`
and docs/tracker.md promises a refusal names its cluster by name and id."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from contracts.identity import Permission, Scope
from muster.ports.memory import MemoryEventLog
from services.auth.domain.authz import Decision
from services.tracker import writes
from services.tracker.app import Tracker
from services.tracker.write_api import BY_NAME

T, CLUSTER, JOB = "acme", "6bfc8503-4835-5750-8971-eb4249f87fa8", "981c729b-83bd-5e3b-8f20-d6d2fe3b0a9f"


def refusing(permission: Permission, scope: Scope) -> Decision:
    """The auth rule's words (`may_operate`): a job's grant is asked on its cluster. alice reads
    the cluster (she knows it by name); anything more is refused."""
    if permission == "read":
        return Decision(True)
    cluster = scope.cluster or scope.id
    return Decision(False, f"alice has no {permission} permission on cluster {cluster} of tenant {T} "
                           f"(a tenant admin can give it: muster grant alice {permission} --scope cluster:{cluster})")


@pytest.fixture
def tracker(monkeypatch: pytest.MonkeyPatch) -> Tracker:
    async def name(_tracker: Tracker, tenant: str, cluster_id: str) -> str:
        return "web" if (tenant, cluster_id) == (T, CLUSTER) else ""

    async def cluster_of(_tracker: Tracker, tenant: str, job_id: str) -> str | None:
        return CLUSTER if job_id == JOB else None

    async def requester(_tracker: Tracker, tenant: str, job_id: str) -> str:
        return "bob"

    monkeypatch.setattr(writes, "cluster_name", name)
    monkeypatch.setattr(writes, "job_cluster", cluster_of)
    monkeypatch.setattr(writes, "job_requester", requester)
    return Tracker(MemoryEventLog(), index=None, max_age=30.0, nc=cast(Any, None))


@pytest.mark.parametrize(("route", "ids", "body"), [
    ("stop_cluster", {"cluster_id": CLUSTER}, {"services": ["zookeeper-server"]}),
    ("delete_cluster", {"cluster_id": CLUSTER}, None),
    ("pause_job", {"job_id": JOB}, None),  # a job's grant is asked on its cluster
])
async def test_a_missing_grant_names_the_cluster_by_name_and_id(tracker: Tracker, route: str, ids: dict[str, str],
                                                                 body: dict[str, Any] | None) -> None:
    actor = writes.Actor(T, "alice", "mst_alice_x_y", may=refusing)
    written = await writes.submit(tracker, cast(Any, SimpleNamespace(own=None)), actor, BY_NAME[route], ids, body)
    message = written.body["error"]["message"]
    assert written.status == 403, written
    assert f"on cluster web ({CLUSTER}) of tenant acme" in message, message
    assert f"--scope cluster:{CLUSTER})" in message, message  # the grant to ask for: by id, as the CLI's


async def test_one_who_may_not_read_the_cluster_is_not_told_its_name(tracker: Tracker) -> None:
    """Session 32: the name was said to anyone refused (`cluster web (<id>)`), reader or not."""
    def nothing(permission: Permission, scope: Scope) -> Decision:
        return Decision(False, f"dave has no {permission} permission on cluster {scope.id} of tenant {T}")

    actor = writes.Actor(T, "dave", "mst_dave_x_y", may=nothing)
    written = await writes.submit(tracker, cast(Any, SimpleNamespace(own=None)), actor, BY_NAME["delete_cluster"],
                                  {"cluster_id": CLUSTER}, None)
    message = written.body["error"]["message"]
    assert written.status == 403 and f"on cluster {CLUSTER} of tenant acme" in message and "web" not in message, message
