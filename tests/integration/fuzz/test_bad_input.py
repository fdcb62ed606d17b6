"""Bad input on every request subject, against the real processes (`Deployment`, as `muster up`
starts them): malformed and adversarial payloads to `muster.ops.<tenant>.<principal>.<verb>` for every verb,
to the solver's dry-run subject and to the job query subject.

Every operation request gets a `Rejected` reply whose reason names the problem (the field, the
unknown id, "not JSON"), never "internal error"; nothing is appended to the log (the EVENTS
stream's message count is the same after each example); no service restarts (same PIDs, all
alive at the end). Job queries are answered only by the planner holding the job (by design: the
tracker falls back to the log), so there a foreign or unknown id gets no answer at all, and a
garbled body changes nothing. Example counts are bounded (`max_examples`) to stay fast.
"""

from __future__ import annotations

import json
import string
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from nats.aio.client import Client
from nats.errors import TimeoutError as NatsTimeout
from pydantic import ValidationError

from contracts import commands, subjects
from contracts.commands import COMMAND_ADAPTER, VERB_OF, Accepted, CreateCluster
from contracts.events import JobSucceeded
from contracts.secrets import secrets_in_clear
from muster.bus.connect import connect, principal_of
from muster.bus.eventstore import EventStore
from muster.bus.server import NatsServer
from muster.bus.streams import ensure_streams
from muster.catalog.files import load_catalog
from muster.catalog.store import apply_catalog
from muster.client import MusterClient
from muster.runtime.supervisor import Deployment

pytestmark = [pytest.mark.nats, pytest.mark.e2e, pytest.mark.timeout(300), pytest.mark.asyncio(loop_scope="module")]

DEMO = Path(__file__).parents[3] / "muster" / "demo" / "catalog"
OWNER, OTHER = "fuzz-owner", "fuzz-other"
COMMAND_OF = {verb: command for command, verb in VERB_OF.items()}
CLUSTER_VERBS = [v for v, c in COMMAND_OF.items() if "cluster_id" in getattr(commands, c).model_fields]
"""The verbs of commands that name an existing cluster (not create, job control, apply)."""
JOB_VERBS = ["pause", "resume", "cancel", "retry"]
SETTINGS = settings(max_examples=100, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass
class Fuzz:
    nc: Client
    deployment: Deployment
    pids: dict[str, int]
    cluster_id: str
    job_id: str
    tried: dict[str, int] = field(default_factory=dict)

    async def events(self) -> int:
        return (await self.nc.jetstream().stream_info(subjects.EVENTS_STREAM)).state.messages

    async def reply(self, subject: str, body: bytes, what: str) -> dict[str, Any]:
        """Send one request; the log must not grow. A `retry` rejection says nothing of the
        input (the planner's shard lease was renewed late: at load 20, with a 1 MB body, "shard 0
        moved to another planner"), so the request goes again, as a client sends it again."""
        self.tried[what] = self.tried.get(what, 0) + 1
        before = await self.events()
        for _ in range(5):
            # 30 s: a string of a million NULs is 6 MB of JSON, which took over 10 s at load 20.
            answer = json.loads((await self.nc.request(subject, body, timeout=30)).data)
            if not (answer.get("type") == "Rejected" and answer.get("retry")):
                break
        assert await self.events() == before, f"{subject} {body[:200]!r} appended to the log"
        return answer

    async def rejected(self, tenant: str, verb: str, body: bytes, what: str) -> str:
        answer = await self.reply(f"{subjects.OPS}.{tenant}.{principal_of(self.nc)}.{verb}", body, what)  # raw: bad tenants too
        assert answer.get("type") == "Rejected", (verb, body[:300], answer)
        reason = str(answer["reason"])
        assert reason and "internal error" not in reason, (verb, body[:300], reason)
        return reason


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def fuzz(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Fuzz]:
    base = tmp_path_factory.mktemp("fuzz")
    server = await NatsServer(base / "nats").start()
    deployment = Deployment(base / "deploy", nats_url=server.url, tenants=OWNER,
                            extra_args={"provisioner": ["--work-dir", str(base / "work")]})
    nc = await connect(server.url, name="fuzz")
    try:
        await ensure_streams(nc.jetstream())
        await deployment.start()
        catalog = load_catalog(DEMO)
        sim = catalog.providers["sim"]
        catalog.providers["sim"] = sim.model_copy(update={"provisioner": {**sim.provisioner, "latency_ms": "0"}})
        await apply_catalog(EventStore(nc), OWNER, catalog, by="fuzz")
        client = MusterClient(nc)
        made = await client.send(OWNER, CreateCluster(name="owned", template="hadoop-small", nodes=2))
        assert isinstance(made, Accepted), made
        assert isinstance(await client.wait(made.job_id, tenant=OWNER, timeout=60), JobSucceeded)
        fuzz = Fuzz(nc, deployment, {c.name: c.pid for c in deployment.children}, made.cluster_id, made.job_id)
        yield fuzz
        alive = {c.name: c.pid for c in deployment.children if c.process.returncode is None}
        assert alive == fuzz.pids, f"services restarted or died: before {fuzz.pids}, after {alive}"
        print(f"\n[fuzz] inputs tried: {sum(fuzz.tried.values())} {fuzz.tried}")
    finally:
        await nc.close()
        await deployment.stop()
        await server.stop()


# -- strategies ---------------------------------------------------------------------------------

verbs = st.sampled_from(subjects.OPERATION_VERBS)
# JSON values: no NaN or Infinity, which strict parsing refuses before any field is looked at (test_a_body_strict_json_refuses_is_rejected_naming_why).
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)


def base_body(verb: str, cluster_id: str = "no-such-cluster", job_id: str = "no-such-job") -> dict[str, Any]:
    """A well-formed request that names nothing the requester may act on."""
    command = COMMAND_OF[verb]
    body: dict[str, Any] = {"type": command}
    if command == "CreateCluster":
        return {**body, "name": "fz", "template": "no-such-template", "nodes": 3}
    if verb in JOB_VERBS or command in ("ApproveJob", "RejectJob"):  # every command on a job names it
        return {**body, "job_id": job_id}
    if command == "ApplyPlan":
        return {**body, "plan_id": "no-such-plan"}
    body["cluster_id"] = cluster_id
    extra: dict[str, dict[str, Any]] = {
        "expand": {"nodes": 3}, "shrink": {"nodes": 1}, "add-services": {"services": ["base"]},
        "remove-services": {"services": ["base"]}, "configure": {"config": {}}, "upgrade": {"service": "base"},
        "rollback": {"to_job": "no-such-job"},
    }
    return {**body, **extra.get(verb, {})}


def expected_field(body: dict[str, Any]) -> str | None:
    """The field our own copy of the contracts rejects first, or None if the body is valid."""
    try:
        COMMAND_ADAPTER.validate_python(body)
    except ValidationError as err:
        loc = [str(p) for p in err.errors()[0]["loc"]]
        return loc[1] if len(loc) > 1 else loc[0]
    return None


# -- operations ---------------------------------------------------------------------------------


@SETTINGS
@given(verb=verbs, data=st.binary(max_size=300))
async def test_a_body_that_is_not_a_json_object_is_rejected(fuzz: Fuzz, verb: str, data: bytes) -> None:
    try:
        parsed = json.loads(data)
    except (UnicodeDecodeError, ValueError):
        parsed = None
    if isinstance(parsed, dict):
        return
    reason = await fuzz.rejected(OTHER, verb, data, "not a JSON object")
    assert "not UTF-8 JSON" in reason or "not valid JSON" in reason or "JSON object" in reason or "levels deep" in reason, reason
    assert "codec" not in reason, reason


async def test_a_body_strict_json_refuses_is_rejected_naming_why(fuzz: Fuzz) -> None:
    """Through the planner process's shard router: a body nesting 5,000 levels raised RecursionError
    there (the request went unanswered), and NaN reached the cluster's config as null."""
    deep = b'{"name": "c", "template": "t", "nodes": 2, "config": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    reason = await fuzz.rejected(OTHER, "create", deep, "deep")
    assert reason.startswith("request body nests 5,001 levels deep; the limit is 32"), reason
    nan = b'{"name": "c", "template": "t", "nodes": 2, "config": {"a": NaN}}'
    reason = await fuzz.rejected(OTHER, "create", nan, "NaN")
    assert reason.startswith("request body is not valid JSON: NaN is not a JSON number"), reason


@SETTINGS
@given(verb=verbs, key=st.sampled_from(["name", "template", "nodes", "cluster_id", "job_id", "services", "config",
                                        "service", "to_job", "request_id", "requested_by", "dry_run", "restart"]),
       value=json_values)
@example(verb="create", key="request_id", value=[])  # found here: an empty key was replaced, not named
async def test_a_field_of_the_wrong_type_is_rejected_by_name(fuzz: Fuzz, verb: str, key: str, value: Any) -> None:
    body = {**base_body(verb), key: value}
    reason = await fuzz.rejected(OTHER, verb, json.dumps(body).encode(), "wrong types")
    field_name = expected_field(body)
    if field_name is not None:
        assert field_name in reason, (body, reason)


@SETTINGS
@given(verb=verbs, key=st.text(string.ascii_letters + "_", min_size=1, max_size=30), value=json_values)
@example(verb="create", key="Auth", value=1)  # found here: a secret's name, refused by the secrets rule first
async def test_an_unknown_field_is_rejected_by_name(fuzz: Fuzz, verb: str, key: str, value: Any) -> None:
    body = base_body(verb)
    if key in body or key in ("type", "v", "request_id", "requested_by", "dry_run", "restart", "services", "provider",
                              "hardwaretype", "imagetype", "config", "nodes", "name", "template", "cluster_id", "job_id",
                              "service", "to_job") or key in getattr(commands, COMMAND_OF[verb]).model_fields:
        return  # (a field of the verb's command: hypothesis found delete's `if_version`)
    if secrets_in_clear({key: value}):
        return  # a secret's name (`Auth`, `token`...) is refused by the secrets rule first (its own tests)
    reason = await fuzz.rejected(OTHER, verb, json.dumps({**body, key: value}).encode(), "unknown fields")
    assert key in reason and "xtra" in reason, reason


@settings(SETTINGS, max_examples=15)
@given(verb=verbs, key=st.sampled_from(["name", "template", "cluster_id", "job_id", "requested_by", "service", "to_job"]),
       size=st.sampled_from([129, 10_000, 1_000_000]), char=st.sampled_from(["a", "é", "*", ".", ">", " ", "\x00"]))
async def test_a_huge_string_is_rejected(fuzz: Fuzz, verb: str, key: str, size: int, char: str) -> None:
    body = {**base_body(verb), key: char * size}
    reason = await fuzz.rejected(OTHER, verb, json.dumps(body).encode(), "huge strings")
    field_name = expected_field(body)
    if field_name is not None:
        assert field_name in reason, (key, size, reason[:300])


def not_a_valid_count(x: float) -> bool:
    return not (x == x and abs(x) != float("inf") and x == int(x) and 1 <= x <= 10_000)


@SETTINGS
@given(verb=st.sampled_from(["create", "expand", "shrink"]),
       nodes=st.one_of(st.integers(max_value=0), st.integers(min_value=10_001), st.just(2**63), st.just(-(2**63)),
                       st.just(10**40), st.floats().filter(not_a_valid_count)))
async def test_a_negative_or_enormous_node_count_is_rejected(fuzz: Fuzz, verb: str, nodes: Any) -> None:
    # On the owner's own cluster and template: only the count is wrong.
    body = base_body(verb, cluster_id=fuzz.cluster_id)
    if verb == "create":
        body["template"] = "hadoop-small"
    body["nodes"] = nodes
    text = json.dumps(body, allow_nan=True).encode()
    reason = await fuzz.rejected(OWNER, verb, text, "node counts")
    assert "nodes" in reason, reason


@SETTINGS
@given(verb=st.sampled_from(CLUSTER_VERBS + JOB_VERBS), dry_run=st.booleans())
async def test_another_tenants_cluster_or_job_is_unknown(fuzz: Fuzz, verb: str, dry_run: bool) -> None:
    body = base_body(verb, cluster_id=fuzz.cluster_id, job_id=fuzz.job_id)
    if verb == "rollback":
        body["to_job"] = fuzz.job_id
    if "dry_run" in getattr(commands, COMMAND_OF[verb]).model_fields:
        body["dry_run"] = dry_run
    reason = await fuzz.rejected(OTHER, verb, json.dumps(body).encode(), "other tenants' ids")
    # In the words of a read of it (`no cluster <id> in tenant <t>`), as of a cluster that is none.
    expected = f"unknown job {fuzz.job_id!r}" if verb in JOB_VERBS else f"no cluster {fuzz.cluster_id} in tenant {OTHER}"
    assert expected in reason, reason


@settings(SETTINGS, max_examples=20)
@given(verb=verbs, tenant=st.one_of(st.text(string.ascii_letters, min_size=129, max_size=300),
                                    st.text(st.sampled_from("$%&@!#é+=~"), min_size=1, max_size=20)))
async def test_a_tenant_that_is_not_a_name_is_rejected(fuzz: Fuzz, verb: str, tenant: str) -> None:
    reason = await fuzz.rejected(tenant, verb, json.dumps(base_body(verb)).encode(), "bad tenants")
    assert "tenant" in reason, reason


# -- dry-run solves and job queries -------------------------------------------------------------


@SETTINGS
@given(data=st.one_of(st.binary(max_size=300), json_values.map(lambda v: json.dumps(v).encode()),
                      st.builds(lambda n: json.dumps({"type": "LayoutRequested", "job_id": "x", "cluster_id": "y",
                                                      "template": "t", "nodes": n, "catalog": {}}).encode(),
                                st.integers(max_value=-1) | st.just(10**40))))
async def test_the_solver_answers_garbage_with_an_explanation(fuzz: Fuzz, data: bytes) -> None:
    answer = await fuzz.reply(subjects.solve_request(OTHER, principal_of(fuzz.nc)), data, "solve requests")
    assert answer.get("type") == "LayoutUnsolvable" and answer.get("message"), answer


@settings(SETTINGS, max_examples=10)
@given(data=st.binary(max_size=200))
async def test_job_queries_answer_only_the_owner_whatever_the_body(fuzz: Fuzz, data: bytes) -> None:
    own = await fuzz.reply(subjects.job_query(OWNER, principal_of(fuzz.nc), fuzz.job_id), data, "job queries")
    assert own["id"] == fuzz.job_id and own["state"] == "succeeded"
    fuzz.tried["job queries"] += 1
    with pytest.raises(NatsTimeout):  # another tenant asking for it: no answer, nothing leaks
        await fuzz.nc.request(subjects.job_query(OTHER, principal_of(fuzz.nc), fuzz.job_id), data, timeout=0.3)
