"""The Python client against the four services; a request built from the AsyncAPI document
alone; the example program."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from contracts.commands import Accepted, DryRun, ExpandCluster, Rejected
from contracts.events import JobSucceeded
from muster.bus.connect import principal_of
from muster.client import MusterClient, RequestRejected

pytestmark = [pytest.mark.nats, pytest.mark.timeout(180), pytest.mark.parametrize("stack", [{"http": False}], indirect=True),
              pytest.mark.usefixtures("fast")]
Stack = Any
ROOT = Path(__file__).parents[3]


async def test_typed_operations_and_outcomes_through_events(stack: Stack) -> None:
    client: MusterClient = stack.client
    preview = await client.create_cluster("py", template="hadoop-small", nodes=3, dry_run=True)
    assert isinstance(preview, DryRun) and preview.layout is not None and preview.layout.nodes == 3

    reply = await client.create_cluster("py", template="hadoop-small", nodes=3, requested_by="svc-a")
    assert isinstance(reply, Accepted)
    seen = [r.type async for r in client.events(reply.job_id)]
    assert seen[0] == "JobRequested" and seen[-1] == "JobSucceeded" and "TaskCompleted" in seen

    outcome = await client.run(ExpandCluster(cluster_id=reply.cluster_id, nodes=4), timeout=90)
    assert outcome.succeeded and outcome.reply.cluster_id == reply.cluster_id
    cluster = await client.cluster("py")
    assert cluster.id == reply.cluster_id and cluster.status == "active" and len(cluster.nodes) == 4
    assert [c.name for c in await client.clusters()] == ["py"]

    requests = [r.event for r in await stack.store.read(f"muster.evt.{stack.tenant}.job.*") if r.type == "JobRequested"]
    # `by` is the authenticated principal (the subject's, checked by the server), not what the
    # client wrote in the body.
    assert {e.requested_by for e in requests} == {principal_of(client.nc)} != {"svc-a"}
    assert all(e.request["request_id"] for e in requests)

    with pytest.raises(RequestRejected, match="expand rejected: .*more than the cluster's 4 nodes"):
        await client.run(ExpandCluster(cluster_id=reply.cluster_id, nodes=2))


async def test_a_repeated_request_never_creates_a_second_job(stack: Stack) -> None:
    client: MusterClient = stack.client
    first = await client.create_cluster("once", template="hadoop-small", nodes=2, request_id="order-7")
    again = await client.create_cluster("once", template="hadoop-small", nodes=2, request_id="order-7")
    assert isinstance(first, Accepted) and isinstance(again, Accepted)
    assert (again.job_id, again.cluster_id, again.duplicate) == (first.job_id, first.cluster_id, True)
    assert isinstance(await client.wait(first.job_id, timeout=90), JobSucceeded)
    # ...even after the job has ended.
    late = await client.create_cluster("once", template="hadoop-small", nodes=2, request_id="order-7")
    assert isinstance(late, Accepted) and late.job_id == first.job_id and late.duplicate
    jobs = {r.subject for r in await stack.store.read(f"muster.evt.{stack.tenant}.job.*")}
    assert jobs == {f"muster.evt.{stack.tenant}.job.{first.job_id}"}
    assert len(await client.clusters()) == 1


async def test_a_request_built_from_the_asyncapi_document_alone(stack: Stack, fresh_nats: str) -> None:
    doc = json.loads((ROOT / "docs" / "asyncapi.json").read_text())
    operation = doc["operations"]["request.create"]
    channel = doc["channels"][operation["channel"]["$ref"].rsplit("/", 1)[-1]]
    message_ref = channel["messages"]["CreateCluster"]["$ref"].rsplit("/", 1)[-1]
    example = doc["components"]["messages"][message_ref]["examples"][0]["payload"]
    # A token names its principal (mst_<principal>_<id>_<secret>, docs/security.md): that is
    # the subject's {principal} and the inbox the server lets the connection read.
    token = os.environ["MUSTER_TOKEN"]
    principal = token.split("_")[1]
    subject = channel["address"].replace("{tenant}", stack.tenant).replace("{principal}", principal)

    nc = Client()  # a plain NATS client: nothing of muster's code on this side
    await nc.connect(fresh_nats, token=token, inbox_prefix=f"_INBOX.{principal}")
    try:
        answer = json.loads((await nc.request(subject, json.dumps(example).encode(), timeout=10)).data)
    finally:
        await nc.close()
    reply_types = {ref["$ref"].rsplit("/", 1)[-1] for ref in operation["reply"]["messages"]}
    assert answer["type"] == "Accepted" and answer["type"] in reply_types
    schema = doc["components"]["schemas"]["Accepted"]
    assert set(schema["required"]) <= set(answer) and set(answer) <= set(schema["properties"])
    job_channel = doc["channels"]["events.job"]["address"]
    job_subject = job_channel.replace("{tenant}", stack.tenant).replace("{jobId}", answer["job_id"])
    assert isinstance(await stack.client.wait(answer["job_id"], timeout=90), JobSucceeded)
    assert (await stack.store.read(job_subject))[0].type == "JobRequested"


async def test_a_rejection_is_a_reply_not_an_exception(stack: Stack) -> None:
    reply = await stack.client.create_cluster("x", template="nope", nodes=1)
    assert isinstance(reply, Rejected) and "nope" in reply.reason


async def _example(env: dict[str, str], cwd: Path) -> tuple[int, str]:
    env = {k: v for k, v in {**os.environ, **env}.items() if k != "NATS_URL" or "NATS_URL" in env}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "examples" / "cluster_lifecycle.py"), "--nodes", "2", "--request-id", "ex1",
        env=env, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 150)
    return proc.returncode or 0, out.decode()


async def test_the_example_program_runs_against_muster(stack: Stack, fresh_nats: str, tmp_path: Path) -> None:
    # Found as every muster command finds `muster up` from another shell: through $MUSTER_DATA_DIR.
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "nats.url").write_text(fresh_nats + "\n")
    code, text = await _example({"MUSTER_DATA_DIR": str(tmp_path / "up")}, tmp_path)
    assert code == 0, text
    assert "would build" in text and "create accepted" in text and "expand: JobSucceeded" in text
    assert "delete: JobSucceeded" in text
    # Nothing there: one sentence naming where it looked, no traceback.
    (tmp_path / "up" / "nats.url").write_text("nats://127.0.0.1:9\n")
    code, text = await _example({"MUSTER_DATA_DIR": str(tmp_path / "up")}, tmp_path)
    assert code == 3 and "cannot reach NATS at nats://127.0.0.1:9" in text and "Traceback" not in text, text
