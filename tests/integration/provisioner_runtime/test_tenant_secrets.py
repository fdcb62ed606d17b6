"""Two tenants on one provisioner, on a real nats-server: each tenant's tasks run with its own
entries of the secrets file and the shared ones, never the other tenant's, though both tenants'
catalogs name the same provider and one names the other's secret (docs/secrets.md, "Whose
secrets"). What the log keeps is what the tenants read: the marker is checked there."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from contracts import subjects
from contracts.tasks import TaskMessage
from services.provisioner.plugins import PluginRegistry
from services.provisioner.plugins.testing import make_task

from .conftest import Bench, LogWatch

pytestmark = pytest.mark.nats

ACME_REGION = "acme-only-region-5d2"
ACME_DB = "acme-db-password-8e1"


@pytest_asyncio.fixture
async def registry(tmp_path: Path, bench: Bench) -> AsyncIterator[PluginRegistry]:
    acme = bench.tenant
    r = PluginRegistry.discover(secrets={
        "@secrets": {"shared-db": "shared-db-password-3a9"},
        "@tenants": {acme: {"sim": {"region": ACME_REGION}, "@secrets": {"acme-db": ACME_DB}}},
    }, work_dir=tmp_path / "w")
    yield r
    await r.aclose()


async def _publish(bench: Bench, task: TaskMessage, queue: str | None = None) -> None:
    await bench.nc.jetstream().publish(subjects.task_queue(queue or task.tenant, task.provisioner_class),
                                       task.model_dump_json().encode(),
                                       headers={"Nats-Msg-Id": f"{task.job_id}.{task.task_id}.{task.attempt}"})


def _create(tenant: str, task_id: str, **kw: Any) -> TaskMessage:
    return make_task("create", tenant=tenant, task_id=task_id, cluster_id=f"c-{tenant}", **kw)


def _install(tenant: str, task_id: str, reference: str) -> TaskMessage:
    """A service action whose argument is a reference: the simulated automator echoes it, resolved."""
    return make_task("install", tenant=tenant, task_id=task_id, cluster_id=f"c-{tenant}", service="db",
                     action_fields={"script": "connect", "args": reference})


async def test_each_tenant_sees_its_own_secrets_and_never_the_others(bench: Bench, registry: PluginRegistry) -> None:
    acme, beta = bench.tenant, f"t{uuid.uuid4().hex[:12]}"
    beta_log = LogWatch()
    sub = await beta_log.start(bench.nc, beta)
    bench.stack.push_async_callback(sub.unsubscribe)
    await bench.provisioner(registry, "prov-two-tenants", tenants=(acme, beta), capacity=1)

    # A task that says acme but sits on beta's queue is not run at all (the queue's tenant decides).
    await _publish(bench, _create(acme, "forged-create"), queue=beta)
    # Both tenants' catalogs call their simulated provider `sim`; only acme has an entry for it.
    await _publish(bench, _create(acme, "a-create"))
    await _publish(bench, _create(beta, "b-create"))
    # beta names acme's named secret; each names the shared one and its own.
    await _publish(bench, _install(beta, "b-theirs", "secret://acme-db"))
    await _publish(bench, _install(beta, "b-shared", "secret://shared-db"))
    await _publish(bench, _install(beta, "b-nobody", "secret://nobody-db"))
    await _publish(bench, _install(acme, "a-own", "secret://acme-db"))

    def done(log: LogWatch, ids: list[str]) -> bool:
        return all(log.of("TaskSucceeded", i) or log.of("TaskFailed", i) for i in ids)

    await bench.log.wait_for(lambda log: done(log, ["a-create", "a-own"]))
    await beta_log.wait_for(lambda log: done(log, ["b-create", "b-theirs", "b-shared", "b-nobody"]))

    [a_create] = bench.log.of("TaskSucceeded", "a-create")
    [b_create] = beta_log.of("TaskSucceeded", "b-create")
    assert f"region {ACME_REGION}" in a_create.stdout
    assert "region local" in b_create.stdout  # the plugin's default: nothing of acme's

    [own] = bench.log.of("TaskSucceeded", "a-own")
    assert "connect ********" in own.stdout  # resolved (else the reference would show), and masked
    [shared] = beta_log.of("TaskSucceeded", "b-shared")
    assert "connect ********" in shared.stdout
    [theirs] = beta_log.of("TaskFailed", "b-theirs")
    [nobody] = beta_log.of("TaskFailed", "b-nobody")
    assert theirs.error == (f"secret 'acme-db' is not in this provisioner's secrets file (under '@secrets', or "
                            f"'@tenants' → '{beta}' → '@secrets'; docs/secrets.md)")
    assert nobody.error == theirs.error.replace("acme-db", "nobody-db")  # no telling whether another tenant has it

    assert not [r for r in beta_log.events if ACME_REGION in r.event.model_dump_json()]
    assert not [r for r in [*bench.log.events, *beta_log.events] if ACME_DB in r.event.model_dump_json()]
    assert not [r for r in [*bench.log.events, *beta_log.events] if getattr(r.event, "task_id", "") == "forged-create"]
