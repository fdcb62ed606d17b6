"""Issue #18.2: a secret never reaches the log, the logs or an answer. Against the real processes
(`Deployment`, as `muster up` starts them), a hypothesis strategy hides a marker secret anywhere
in a payload — an operation request of any verb, a provider, a template's config, a service's
action fields — under a well-known secret name at any depth, in a list, in a map given as a JSON
string, or as a private key under any name. Every such payload is refused, naming where, never
what. A reference (`secret://db`) is accepted, and resolved only on the worker, from the
provisioner's secrets file.

At the end, everything is grepped for the markers: every file under the deployment's directory
(the nats-server store, which holds the log, the task queue and every bucket, and every
service's log file), every answer the requests and applies got, and the tracker's answers about
every job (status, events, location). A control value, sent in clear where it is no secret, is
found by the same grep: the grep is no blind spot.
"""

from __future__ import annotations

import json
import shutil
import string
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nats.aio.client import Client

from contracts import subjects
from contracts.commands import Accepted, CreateCluster, DeleteCluster
from contracts.events import JobSucceeded
from muster.bus.connect import connect, principal_of
from muster.bus.eventstore import EventStore
from muster.bus.server import NatsServer
from muster.bus.streams import ensure_streams
from muster.catalog.files import CatalogFileError, load_catalog
from muster.catalog.store import apply_catalog
from muster.client import MusterClient
from muster.runtime.supervisor import Deployment

pytestmark = [pytest.mark.nats, pytest.mark.e2e, pytest.mark.timeout(300), pytest.mark.asyncio(loop_scope="module")]

DEMO = Path(__file__).parents[3] / "muster" / "demo" / "catalog"
TENANT = "vault"
MARKER = f"mrk-{uuid.uuid4().hex}"
"""The secret hidden in payloads: it must be found nowhere."""
NAMED = f"named-{uuid.uuid4().hex}"
"""The value of the provisioner's named secret `db`: only the worker may see it."""
CLOUD_KEY = f"cloudkey-{uuid.uuid4().hex}"
"""The libcloud provider's credential, in the provisioner's secrets file only: found nowhere."""
AWS_SECRET = f"awssecret-{uuid.uuid4().hex}"
"""The EC2 secret key of the libcloud provider on the local AWS endpoint (moto accepts any)."""


def _cloud_support() -> Any:
    """tests/integration/provisioner/cloud_support.py (the local AWS endpoint), by its path."""
    import importlib.util
    import sys

    path = Path(__file__).parents[1] / "provisioner" / "cloud_support.py"
    spec = importlib.util.spec_from_file_location("cloud_support", path)
    assert spec is not None and spec.loader is not None
    module = sys.modules.get("cloud_support") or importlib.util.module_from_spec(spec)
    if "cloud_support" not in sys.modules:
        sys.modules["cloud_support"] = module
        spec.loader.exec_module(module)
    return module
CONTROL = f"ctl-{uuid.uuid4().hex}"
"""Sent in clear where it is no secret: the grep must find it."""
SETTINGS = settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
VERBS = ["create", "configure", "expand", "add-services", "upgrade", "pause"]


@dataclass
class Vault:
    nc: Client
    base: Path
    deployment: Deployment
    secrets_file: Path
    answers: list[str] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)
    refused: dict[str, int] = field(default_factory=dict)

    async def stored(self) -> int:
        """Events of this tenant's jobs, clusters, names and catalog (a provisioner registering
        meanwhile is no payload of ours)."""
        info = await self.nc.jetstream().stream_info(subjects.EVENTS_STREAM, subjects_filter=f"{subjects.EVT}.{TENANT}.>")
        kinds = ("job", "cluster", "clustername", "layout", "catalog")
        return sum(n for subject, n in (info.state.subjects or {}).items() if subject.split(".")[3] in kinds)

    def answer(self, text: str, what: str) -> str:
        self.answers.append(text)
        self.refused[what] = self.refused.get(what, 0) + 1
        return text


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def vault(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Vault]:
    base = tmp_path_factory.mktemp("vault")
    secrets_file = base / "secrets.json"
    secrets_file.write_text(json.dumps({"@secrets": {"db": NAMED}, "cloud": {"key": CLOUD_KEY},
                                        "aws": {"key": "testing", "secret": AWS_SECRET}}))
    secrets_file.chmod(0o600)
    server = await NatsServer(base / "nats").start()
    deployment = Deployment(base / "deploy", nats_url=server.url, tenants=TENANT,
                            extra_args={"provisioner": ["--work-dir", str(base / "work"), "--secrets", str(secrets_file)]})
    nc = await connect(server.url, name="vault")
    aws = _cloud_support().moto_ec2()
    try:
        endpoint = await aws.__aenter__()
        await ensure_streams(nc.jetstream())
        await deployment.start()
        catalog = load_catalog(DEMO)
        sim = catalog.providers["sim"]
        catalog.providers["sim"] = sim.model_copy(update={"provisioner": {**sim.provisioner, "latency_ms": "0"}})
        with_cloud(catalog, endpoint)
        await apply_catalog(EventStore(nc), TENANT, catalog, by="vault")
        yield Vault(nc, base, deployment, secrets_file)
    finally:
        await nc.close()
        await deployment.stop()
        await server.stop()
        await aws.__aexit__(None, None, None)


def with_cloud(catalog: Any, endpoint: dict[str, Any]) -> None:
    """Two libcloud providers whose credentials are in the secrets file: its offline `dummy`
    driver, and `ec2` on a local AWS endpoint; the demo template on each."""
    catalog.providers["cloud"] = catalog.providers["sim"].model_copy(update={
        "name": "cloud", "providertype": "libcloud", "provisioner": {"driver": "dummy"}})
    catalog.providers["aws"] = catalog.providers["sim"].model_copy(update={
        "name": "aws", "providertype": "libcloud",
        "provisioner": {"driver": "ec2", "region": "us-east-1", "driver_args": json.dumps(endpoint), "wait_period_s": "0.2"}})
    ami = _cloud_support().UBUNTU_AMI
    for hw in catalog.hardwaretypes.values():
        hw.providermap["cloud"] = {"flavor": "1"}
        hw.providermap["aws"] = {"flavor": "t2.micro"}
    for image in catalog.imagetypes.values():
        image.providermap["cloud"] = {"image": "1", "sshuser": "ubuntu"}
        image.providermap["aws"] = {"image": ami, "sshuser": "ubuntu"}
    template = catalog.clustertemplates["hadoop-small"]
    for name in ("cloud", "aws"):
        catalog.clustertemplates[f"{name}-small"] = template.model_copy(update={
            "name": f"{name}-small", "defaults": template.defaults.model_copy(update={"provider": name})})


# -- strategies -----------------------------------------------------------------------------------

secret_names = st.sampled_from([
    "password", "PASSWORD", "db_password", "dbPassword", "x-password", "passwd", "passphrase", "secret", "client_secret",
    "SECRET_VALUE", "token", "apiToken", "x-auth-token", "key", "api_key", "apiKey", "ssh_key", "sshKey", "private_key",
    "privateKey", "access-key", "master_key", "credential", "credentials", "Credentials", "auth", "Authorization",
])
"""Well-known names of secrets, as people write them (contracts/secrets.py has the rule)."""
names = st.text(string.ascii_lowercase + "_", min_size=1, max_size=8)
plain = st.none() | st.booleans() | st.integers() | st.text(string.ascii_letters + " ", max_size=12)
values = st.recursive(plain, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3), max_leaves=8)
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{MARKER}\n-----END RSA PRIVATE KEY-----"


def _maps(value: Any) -> list[dict[str, Any]]:
    """Every map inside `value` (where a secret can be hidden)."""
    out, stack = [], [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            out.append(v)
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return out


@st.composite
def hiding(draw: st.DrawFn) -> dict[str, Any]:
    """A map with the marker hidden in it, somewhere, somehow."""
    root = draw(st.dictionaries(names, values, max_size=3))
    maps = _maps(root)
    spot = maps[draw(st.integers(0, len(maps) - 1))]  # by index: sampled_from may hand back a copy
    how = draw(st.sampled_from(["plain", "nested", "list", "pem", "json-string"]))
    key = draw(secret_names)
    if how == "plain":
        spot[key] = MARKER
    elif how == "nested":
        spot[key] = {draw(names): MARKER}
    elif how == "list":
        spot[key] = [draw(plain), MARKER]
    elif how == "pem":
        spot[draw(names)] = PEM
    else:
        spot[draw(names)] = json.dumps({key: MARKER})
    return root


def request_body(verb: str, hidden: dict[str, Any], at_top: bool) -> dict[str, Any]:
    bodies: dict[str, dict[str, Any]] = {"create": {"name": "vx", "template": "hadoop-small", "nodes": 2},
                                         "pause": {"job_id": "no-such-job"}}
    body = bodies.get(verb, {"cluster_id": "no-such-cluster"})
    return {**body, **hidden} if at_top else {**body, "config": hidden}


# -- every payload that hides a secret is refused ---------------------------------------------------


@SETTINGS
@given(verb=st.sampled_from(VERBS), hidden=hiding(), at_top=st.booleans())
async def test_a_secret_hidden_anywhere_in_a_request_is_refused(vault: Vault, verb: str, hidden: dict[str, Any], at_top: bool) -> None:
    before = await vault.stored()
    msg = await vault.nc.request(subjects.operation(TENANT, principal_of(vault.nc), verb), json.dumps(request_body(verb, hidden, at_top)).encode(), timeout=10)
    reply = json.loads(vault.answer(msg.data.decode(), f"request {verb}"))
    assert reply["type"] == "Rejected" and "looks like a secret" in reply["reason"], reply
    assert await vault.stored() == before


def entity(kind: str, hidden: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if kind == "providers":
        return "leaky", {"name": "leaky", "providertype": "simulated", "provisioner": {"region": "x", **hidden}}
    if kind == "services":
        return "leaky", {"name": "leaky", "provisioner": {"actions": {"install": {
            "type": "shell", "fields": {"script": "install.sh", "env": json.dumps(hidden)}}}}}
    template = json.loads((DEMO / "clustertemplates" / "hadoop-small.json").read_text())
    template["defaults"]["config"] = hidden
    return "hadoop-small", template


@SETTINGS
@given(kind=st.sampled_from(["providers", "services", "clustertemplates"]), hidden=hiding())
async def test_a_secret_hidden_anywhere_in_a_catalog_entity_is_refused(vault: Vault, kind: str, hidden: dict[str, Any],
                                                                       tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = tmp_path_factory.mktemp("cat")
    shutil.copytree(DEMO, folder, dirs_exist_ok=True)
    name, body = entity(kind, hidden)
    (folder / kind / f"{name}.json").write_text(json.dumps(body))
    before = await vault.stored()
    with pytest.raises(CatalogFileError) as refused:
        await apply_catalog(EventStore(vault.nc), TENANT, load_catalog(folder), by="vault")
    said = vault.answer(str(refused.value), f"catalog {kind}")
    assert "secret" in said or "credential" in said or "private key" in said, said
    assert await vault.stored() == before


# -- a reference is accepted and resolved on the worker only ---------------------------------------


async def test_a_reference_runs_and_a_control_value_in_clear_is_stored(vault: Vault) -> None:
    client = MusterClient(vault.nc)
    reply = await client.send(TENANT, CreateCluster(name="refs", template="hadoop-small", nodes=2,
                                                   config={"db": {"password": "secret://db"}, "note": CONTROL}))
    assert isinstance(reply, Accepted), reply
    vault.answers.append(reply.model_dump_json())
    vault.jobs.append(reply.job_id)
    assert isinstance(await client.wait(reply.job_id, tenant=TENANT, timeout=120), JobSucceeded)


@pytest.mark.parametrize("template", ["cloud-small", "aws-small"])
async def test_clusters_on_the_libcloud_provider_run_with_credentials_from_the_secrets_file(vault: Vault, template: str) -> None:
    """The dummy driver, and EC2 on the local AWS endpoint: create and delete, the whole way."""
    client = MusterClient(vault.nc)
    reply = await client.send(TENANT, CreateCluster(name=template, template=template, nodes=2))
    assert isinstance(reply, Accepted), reply
    vault.answers.append(reply.model_dump_json())
    vault.jobs.append(reply.job_id)
    assert isinstance(await client.wait(reply.job_id, tenant=TENANT, timeout=120), JobSucceeded)
    info = await client.cluster(reply.cluster_id, tenant=TENANT)
    assert len(info.ipaddresses) == 2
    gone = await client.send(TENANT, DeleteCluster(cluster_id=reply.cluster_id))
    assert isinstance(gone, Accepted), gone
    vault.jobs.append(gone.job_id)
    assert isinstance(await client.wait(gone.job_id, tenant=TENANT, timeout=120), JobSucceeded)


# -- then: nowhere --------------------------------------------------------------------------------


async def test_the_markers_are_nowhere_and_the_control_is_found(vault: Vault) -> None:
    assert vault.refused, "the examples above did not run"
    headers = {"X-Muster-Tenant": TENANT}
    async with aiohttp.ClientSession() as http:
        for job in vault.jobs:
            for path in (f"/v1/jobs/{job}", f"/v1/jobs/{job}/events?limit=500", f"/v1/jobs/{job}/location"):
                async with http.get(vault.deployment.tracker_url + path, headers=headers) as resp:
                    vault.answers.append(await resp.text())
    await vault.deployment.stop()  # every log line flushed, every store file closed
    files = [p for p in vault.base.rglob("*") if p.is_file() and p != vault.secrets_file]
    found = {m: [str(p) for p in files if m.encode() in p.read_bytes()] for m in (MARKER, NAMED, CLOUD_KEY, AWS_SECRET, CONTROL)}
    answered = {m: [a[:200] for a in vault.answers if m in a] for m in (MARKER, NAMED, CLOUD_KEY, AWS_SECRET, CONTROL)}
    print(f"\n[secrets] {sum(vault.refused.values())} payloads refused {vault.refused}; grepped {len(files)} files, "
          f"{len(vault.answers)} answers; control found in {len(found[CONTROL])} files")
    assert found[MARKER] == [] and answered[MARKER] == [], (found[MARKER], answered[MARKER])
    assert found[NAMED] == [] and answered[NAMED] == [], (found[NAMED], answered[NAMED])
    assert found[CLOUD_KEY] == [] and answered[CLOUD_KEY] == [], (found[CLOUD_KEY], answered[CLOUD_KEY])
    assert found[AWS_SECRET] == [] and answered[AWS_SECRET] == [], (found[AWS_SECRET], answered[AWS_SECRET])
    assert found[CONTROL], "the grep finds nothing at all: the control value should be in the log"
    assert any(CONTROL in a for a in vault.answers), "the tracker's answers should show the control value"
