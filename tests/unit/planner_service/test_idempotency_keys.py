"""Issue #18.7: a request_id reused with a different request silently returned the first job.
Now the same request again is a duplicate (same job), and a different one under the same key
is refused, naming the first job; nothing reaches the log."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from planner_harness import Harness

from contracts.commands import Accepted, CreateCluster, DryRun, ExpandCluster, PauseJob, Rejected, ResumeJob


async def _refused(h: Harness, command: object) -> str:
    before = len(h.log.records)
    reply = await h.send(command)
    assert isinstance(reply, Rejected), reply
    assert len(h.log.records) == before
    return reply.reason


async def test_a_create_sent_again_is_the_same_job_and_another_under_its_key_is_refused(h: Harness) -> None:
    first = CreateCluster(name="c1", template="hadoop-small", nodes=3, request_id="key-1")
    reply = await h.send(first)
    assert isinstance(reply, Accepted) and not reply.duplicate
    again = await h.send(first)
    assert isinstance(again, Accepted) and again.duplicate and again.job_id == reply.job_id

    reason = await _refused(h, first.model_copy(update={"nodes": 4}))
    assert f"request_id 'key-1' was used already, for job {reply.job_id} (create of cluster {reply.cluster_id})" in reason
    assert "differs in nodes" in reason and "use a new request_id" in reason
    reason = await _refused(h, ExpandCluster(cluster_id=reply.cluster_id, nodes=4, request_id="key-1"))
    # Another operation under the key is named as such, not by the contracts' inner fields.
    assert f"for job {reply.job_id} (create of cluster {reply.cluster_id}), with a different request (this one is an expand)" in reason
    assert "differs in" not in reason


async def test_a_cluster_operation_under_a_used_key_is_refused(h: Harness) -> None:
    cid = await h.cluster_of(2)
    expand = ExpandCluster(cluster_id=cid, nodes=3, request_id="grow-1")
    reply = await h.ok(expand)
    again = await h.send(expand)
    assert isinstance(again, Accepted) and again.duplicate and again.job_id == reply.job_id
    reason = await _refused(h, expand.model_copy(update={"nodes": 5}))
    assert f"for job {reply.job_id} (expand of cluster {cid})" in reason and "differs in nodes" in reason


async def test_job_control_under_a_used_key_is_refused(h: Harness) -> None:
    h.behaviour = lambda m: "hold"
    reply = await h.send(CreateCluster(name="held", template="hadoop-small", nodes=2))
    assert isinstance(reply, Accepted)
    await h.settle()
    pause = PauseJob(job_id=reply.job_id, request_id="ctl-1")
    assert isinstance(await h.send(pause), Accepted)
    again = await h.send(pause)
    assert isinstance(again, Accepted) and again.duplicate
    reason = await _refused(h, ResumeJob(job_id=reply.job_id, request_id="ctl-1"))
    assert reason == f"request_id 'ctl-1' was used already, to pause job {reply.job_id}: send that same request again, or use a new request_id"


class Workers:
    """Live provisioners; None: presence could not be read."""

    def __init__(self, live: list[Any] | None) -> None:
        self.now = live

    async def live(self) -> list[Any] | None:
        return self.now


def _provisioner(ident: str, tenants: tuple[str, ...]) -> Any:
    return SimpleNamespace(info=SimpleNamespace(id=ident, provisioner_class="default", tenants=tenants), draining=False)


async def test_a_job_nobody_would_run_now_is_accepted_with_a_warning() -> None:
    """Issue #18.7: a create for a tenant no live provisioner serves was accepted silently and
    its tasks waited 900 s."""
    h = Harness()
    h.workers = Workers([_provisioner("p-other", ("other",))])
    planner = await h.restart()
    assert planner.requests.workers is h.workers
    # The preview says it too (it said nothing: the wait showed only once the job was made).
    dry = await h.send(CreateCluster(name="lonely", template="hadoop-small", nodes=2, dry_run=True))
    assert isinstance(dry, DryRun) and dry.warnings and dry.warnings[0].startswith("no live provisioner serves tenant 'default'")
    reply = await h.send(CreateCluster(name="lonely", template="hadoop-small", nodes=2))
    assert isinstance(reply, Accepted)
    assert reply.warnings == ["no live provisioner serves tenant 'default' (class 'default'): the job's tasks wait until "
                              "one registers, and each attempt times out after 900 s; 1 live provisioner(s) of class 'default' "
                              "serve other tenants: a super admin lists them with muster provisioners list --all and grants one the queue: "
                              "muster grant PROVISIONER execute --tenant default --scope queue:default"]

    h.workers.now = [_provisioner("p-other", ("other", "default"))]
    served = await h.send(CreateCluster(name="served", template="hadoop-small", nodes=2))
    assert isinstance(served, Accepted) and served.warnings == []
    h.workers.now = None  # presence unreadable: no warning rather than a wrong one
    unknown = await h.send(CreateCluster(name="unknown", template="hadoop-small", nodes=2))
    assert isinstance(unknown, Accepted) and unknown.warnings == []
