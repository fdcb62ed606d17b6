"""A failure no retry can mend is not retried, with the real planner, solver and provisioner on a
nats-server and the libcloud provider against a local AWS endpoint (moto's server, checking
credentials, so it refuses every request): each node's create runs once, and the job's reason says
it was not retried. An endpoint that does not answer is retried as before. A shell script (over
real SSH to localhost nodes) that exits 78 is not retried either."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from contracts import subjects
from contracts.commands import Accepted, CreateCluster
from contracts.events import JobRolledBack
from muster.catalog.store import apply_catalog

from .conftest import quick_demo_catalog

SECRETS = {"aws": {"key": "AKIAWRONGWRONGWRONG1", "secret": "wrong-secret-5b7e"}, "down": {"key": "k", "secret": "s"}}
pytestmark = [pytest.mark.nats, pytest.mark.timeout(180),
              pytest.mark.parametrize("stack", [{"http": False, "secrets": SECRETS}], indirect=True)]
Stack = Any


def _cloud_support() -> Any:
    """tests/integration/provisioner/cloud_support.py (the local AWS endpoint), by its path."""
    path = Path(__file__).parents[1] / "provisioner" / "cloud_support.py"
    if "cloud_support" not in sys.modules:
        spec = importlib.util.spec_from_file_location("cloud_support", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["cloud_support"] = module
        spec.loader.exec_module(module)
    return sys.modules["cloud_support"]


async def _on_clouds(stack: Stack, endpoints: dict[str, dict[str, Any]]) -> None:
    """A libcloud `ec2` provider per endpoint, and a `<name>-small` template on each."""
    catalog = quick_demo_catalog()
    template = catalog.clustertemplates["hadoop-small"]
    for name, endpoint in endpoints.items():
        catalog.providers[name] = catalog.providers["sim"].model_copy(update={
            "name": name, "providertype": "libcloud",
            "provisioner": {"driver": "ec2", "region": "us-east-1", "driver_args": json.dumps(endpoint)}})
        for hw in catalog.hardwaretypes.values():
            hw.providermap[name] = {"flavor": "t2.micro"}
        for image in catalog.imagetypes.values():
            image.providermap[name] = {"image": _cloud_support().UBUNTU_AMI, "sshuser": "ubuntu"}
        catalog.clustertemplates[f"{name}-small"] = template.model_copy(update={
            "name": f"{name}-small", "defaults": template.defaults.model_copy(update={"provider": name})})
    await apply_catalog(stack.store, stack.tenant, catalog)


async def _created(stack: Stack, template: str) -> tuple[JobRolledBack, dict[str, list[int]]]:
    reply = await stack.client.send(stack.tenant, CreateCluster(name=template, template=template, nodes=2))
    assert isinstance(reply, Accepted), reply
    final = await stack.client.wait(reply.job_id, timeout=120)
    assert isinstance(final, JobRolledBack), final
    return final, await _ran(stack, reply.job_id)


async def _ran(stack: Stack, job_id: str) -> dict[str, list[int]]:
    """The attempts of each task a provisioner claimed: what ran (with segments, docs/decisions/
    0058, a create's next tasks are queued with it, and never run if it fails)."""
    attempts: dict[str, set[int]] = {}
    for r in await stack.store.read(subjects.job_task_outcomes(stack.tenant, job_id)):
        if r.type == "TaskClaimed":
            attempts.setdefault(r.event.task_id, set()).add(r.event.attempt)
    return {task: sorted(tries) for task, tries in attempts.items()}


async def test_refused_credentials_are_not_retried_and_an_unreachable_cloud_is(stack: Stack, closed_port: int) -> None:
    async with _cloud_support().moto_ec2(auth=True) as refusing:
        nobody = {"host": "127.0.0.1", "port": closed_port, "secure": False}
        await _on_clouds(stack, {"aws": refusing, "down": nobody})
        refused, attempts = await _created(stack, "aws-small")
        assert attempts == {"n1000.create": [1], "n1001.create": [1]}
        assert refused.reason.startswith("task n100"), refused.reason
        assert (".create failed, not retried: its plugin says a retry cannot succeed: create: the cloud refused the "
                "credentials of provider 'aws' (list nodes: AuthFailure: ") in refused.reason
        assert SECRETS["aws"]["secret"] not in refused.reason

    down, attempts = await _created(stack, "down-small")
    assert attempts == {"n1000.create": [1, 2, 3], "n1001.create": [1, 2, 3]}
    assert ".create failed 3 times: create: list nodes: cannot reach the cloud at 127.0.0.1:" in down.reason, down.reason


async def test_a_script_that_exits_78_is_not_retried(stack: Stack) -> None:
    """The shell automator over real SSH (localhost nodes): `exit "$MUSTER_EXIT_PERMANENT"` is the
    script's word that no retry can mend it; the job stops at the first attempt and says why."""
    catalog = quick_demo_catalog()
    template = catalog.clustertemplates["hadoop-small"]
    catalog.providers["local"] = catalog.providers["sim"].model_copy(update={
        "name": "local", "providertype": "localhost", "provisioner": {}})
    for hw in catalog.hardwaretypes.values():
        hw.providermap["local"] = {"flavor": "loopback"}
    for image in catalog.imagetypes.values():
        image.providermap["local"] = {"image": "host"}
    base = catalog.services["base"]
    install = base.provisioner.actions["install"].model_copy(update={
        "type": "shell", "fields": {"script": 'echo "no such version: 9.9" >&2; exit "$MUSTER_EXIT_PERMANENT"'}})
    catalog.services["base"] = base.model_copy(update={"provisioner": base.provisioner.model_copy(update={
        "actions": {**base.provisioner.actions, "install": install}})})
    catalog.clustertemplates["local-small"] = template.model_copy(update={
        "name": "local-small", "defaults": template.defaults.model_copy(update={"provider": "local"})})
    await apply_catalog(stack.store, stack.tenant, catalog)

    final, attempts = await _created(stack, "local-small")
    ran = {task: tries for task, tries in attempts.items() if "install" in task and "base" in task}
    assert ran and all(tries == [1] for tries in ran.values()), attempts
    assert ("failed, not retried: its plugin says a retry cannot succeed: base install: script exited with status 78 "
            "(permanent: not retried): no such version: 9.9") in final.reason, final.reason


async def test_a_secret_the_provisioner_lacks_is_not_retried_and_is_named(stack: Stack) -> None:
    """`secret://NAME` that this (only) provisioner's secrets file lacks: no retry can mend it,
    so each create runs once (it ran 3 times), and the reason names the secret."""
    reply = await stack.client.send(stack.tenant, CreateCluster(name="nosecret", template="hadoop-small", nodes=2,
                                                                config={"db": {"password": "secret://db-prod"}}))
    assert isinstance(reply, Accepted), reply
    final = await stack.client.wait(reply.job_id, timeout=120)
    assert isinstance(final, JobRolledBack), final
    assert await _ran(stack, reply.job_id) == {"n1000.create": [1], "n1001.create": [1]}
    assert ("failed, not retried: its plugin says a retry cannot succeed: secret 'db-prod' is not in this provisioner's "
            "secrets file") in final.reason, final.reason


async def test_the_simulated_plugins_show_failed_not_retried(stack: Stack) -> None:
    """`failure_permanent_install` on the sim provider (the automator reads it there): the
    install that fails is not retried, and the job says so."""
    catalog = quick_demo_catalog()
    sim = catalog.providers["sim"]
    catalog.providers["sim"] = sim.model_copy(update={"provisioner": {
        **sim.provisioner, "failure_rate_install": "1", "failure_permanent_install": "true"}})
    await apply_catalog(stack.store, stack.tenant, catalog)
    final, attempts = await _created(stack, "hadoop-small")
    said = "failed, not retried: its plugin says a retry cannot succeed: simulated permanent failure (not retried) of install"
    assert said in final.reason, final.reason
    installs = {task: tries for task, tries in attempts.items() if ".install." in task}
    assert installs and all(tries == [1] for tries in installs.values()), attempts
