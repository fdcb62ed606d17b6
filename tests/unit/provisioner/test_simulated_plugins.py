"""The simulated cloud and automator: latency, failure injection, determinism, retries."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from contracts.catalog import Action
from services.provisioner.plugins import PluginRegistry, simulation
from services.provisioner.plugins.builtin.simulated_automator.automator import SimulatedAutomator
from services.provisioner.plugins.builtin.simulated_provider.provider import SimulatedProvider
from services.provisioner.plugins.simulation import Latency
from services.provisioner.plugins.testing import make_task, next_task

DEMO = Path(__file__).resolve().parents[3] / "muster" / "demo" / "catalog"


async def test_demo_catalog_provider_and_service_work(registry: PluginRegistry) -> None:
    provider = json.loads((DEMO / "providers" / "sim.json").read_text())
    service = json.loads((DEMO / "services" / "base.json").read_text())
    fields = {**provider["provisioner"], "latency_ms": "0-2"}
    create = make_task("create", provider_name=provider["name"], providertype=provider["providertype"], provider_fields=fields)
    out = await registry.execute(create)
    assert out.ok, out.error
    assert out.result["providerid"].startswith("sim-") and out.ipaddresses["access_v4"].startswith("10.")
    confirm = next_task(create, out, "confirm")
    assert (await registry.execute(confirm)).ok
    action = service["provisioner"]["actions"]["install"]
    install = make_task(
        "install", provider_fields=fields, service="base", automator=action["type"], action_fields=action["fields"]
    )
    out = await registry.execute(install)
    assert out.ok and "install base" in out.stdout
    delete = next_task(confirm, out, "delete")
    assert delete.results["providerid"] == confirm.results["providerid"]
    assert (await registry.execute(delete)).ok


async def test_create_confirm_delete_keeps_machines_in_memory(registry: PluginRegistry) -> None:
    provider = registry.provider("simulated")
    assert isinstance(provider, SimulatedProvider)
    create = make_task("create")
    out = await registry.execute(create)
    pid = out.result["providerid"]
    assert pid in provider.machines and out.result["ssh-auth"] == {"user": "muster"}
    confirm = next_task(create, out, "confirm")
    out2 = await registry.execute(confirm)
    assert out2.ok and provider.machines[pid].confirmed
    assert out2.ipaddresses["access_v4"] == out.ipaddresses["access_v4"]
    delete = next_task(confirm, out2, "delete")
    assert (await registry.execute(delete)).ok
    assert pid not in provider.machines


async def test_delete_and_confirm_of_an_unknown_id_succeed(registry: PluginRegistry) -> None:
    # A retry can land on another provisioner process than the one that created the machine.
    delete = make_task("delete", results={"providerid": "sim-elsewhere"})
    out = await registry.execute(delete)
    assert out.ok and "already gone" in out.stdout
    assert (await registry.execute(make_task("delete"))).ok  # create never succeeded
    confirm = await registry.execute(make_task("confirm", results={"providerid": "sim-elsewhere"}))
    assert confirm.ok and confirm.ipaddresses["access_v4"].startswith("10.")


async def test_confirm_without_providerid_fails(registry: PluginRegistry) -> None:
    out = await registry.execute(make_task("confirm"))
    assert not out.ok and "no providerid" in out.error


async def test_failure_rate_one_always_fails_and_zero_never(registry: PluginRegistry) -> None:
    for i in range(20):
        assert not (await registry.execute(make_task("create", provider_fields={"failure_rate": "1"}, task_id=f"t{i}"))).ok
        assert (await registry.execute(make_task("create", provider_fields={"failure_rate": "0"}, task_id=f"u{i}"))).ok


async def test_failure_rate_is_roughly_honoured(registry: PluginRegistry) -> None:
    fails = 0
    for i in range(400):
        out = await registry.execute(make_task("create", provider_fields={"failure_rate": "0.25", "seed": "7"}, task_id=f"t{i}"))
        fails += not out.ok
    assert 60 < fails < 140


async def test_per_action_failure_rate_overrides_the_general_one(registry: PluginRegistry) -> None:
    fields = {"failure_rate": "1", "failure_rate_create": "0"}
    create = make_task("create", provider_fields=fields)
    out = await registry.execute(create)
    assert out.ok
    confirm = await registry.execute(next_task(create, out, "confirm"))
    assert not confirm.ok and confirm.error == "simulated failure of confirm (failure rate 1)"


async def test_failed_create_leaves_no_machine(registry: PluginRegistry) -> None:
    provider = registry.provider("simulated")
    assert isinstance(provider, SimulatedProvider)
    out = await registry.execute(make_task("create", provider_fields={"failure_rate": "1"}))
    assert not out.ok and out.result == {} and not provider.machines


async def test_fail_first_attempts_makes_retries_succeed(registry: PluginRegistry) -> None:
    fields = {"fail_first_attempts": "2"}
    results = [(await registry.execute(make_task("create", provider_fields=fields, attempt=a))).ok for a in (1, 2, 3)]
    assert results == [False, False, True]

    fields = {"fail_first_attempts": "0", "fail_first_attempts_create": "2"}  # creates only
    creates = [(await registry.execute(make_task("create", provider_fields=fields, attempt=a))).ok for a in (1, 2, 3)]
    confirm = await registry.execute(make_task("confirm", provider_fields=fields, attempt=1, results={"providerid": "sim-1"}))
    assert creates == [False, False, True] and confirm.ok


async def test_a_failure_of_the_first_attempts_says_so_not_a_failure_rate_of_0(registry: PluginRegistry) -> None:
    """It said `simulated failure of create (failure rate 0)`: a rate that cannot fail."""
    fields = {"fail_first_attempts_create": "2"}
    out = await registry.execute(make_task("create", provider_fields=fields, attempt=2))
    assert out.error == "simulated failure of create (attempt 2: fail_first_attempts is 2)"


async def test_an_injected_failure_may_be_permanent_per_action_and_from_the_provider(registry: PluginRegistry) -> None:
    """To show "failed, not retried" (decision 0039): the provider's own failures, and an
    action's through the automator, which falls back to the provider's fields."""
    out = await registry.execute(make_task("create", provider_fields={"failure_rate": "1", "failure_permanent": "true"}))
    assert not out.ok and out.permanent and out.error == "simulated permanent failure (not retried) of create (failure rate 1)"
    plain = await registry.execute(make_task("create", provider_fields={"failure_rate": "1"}))
    assert not plain.ok and not plain.permanent and plain.error == "simulated failure of create (failure rate 1)"

    fields = {"fail_first_attempts": "1", "failure_permanent_install": "yes"}  # installs only
    install = await registry.execute(make_task("install", service="base", provider_fields=fields))
    assert not install.ok and install.permanent and "permanent failure (not retried) of install" in install.error
    configure = await registry.execute(make_task("configure", service="base", provider_fields=fields))
    assert not configure.ok and not configure.permanent
    assert (await registry.execute(make_task("install", service="base", provider_fields=fields, attempt=2))).ok
    own = await registry.execute(make_task("install", service="base", provider_fields=fields,
                                           action_fields={"failure_permanent_install": "false"}))
    assert not own.ok and not own.permanent  # the action's own field first

    bad = await registry.execute(make_task("install", service="base", action_fields={"failure_permanent": "sometimes"}))
    assert not bad.ok and "failure_permanent" in bad.error


async def test_seed_makes_every_attempt_deterministic(tmp_path: Path) -> None:
    async def outcomes(work: str, order: list[int]) -> dict[int, tuple[bool, str]]:
        reg = PluginRegistry.discover(work_dir=tmp_path / work)
        try:
            got = {}
            for i in order:
                fields = {"failure_rate": "0.5", "latency_ms": "0-1", "seed": "42"}
                out = await reg.execute(make_task("create", provider_fields=fields, task_id=f"task-{i}"))
                got[i] = (out.ok, out.result.get("providerid", ""))
            return got
        finally:
            await reg.aclose()

    first = await outcomes("a", list(range(30)))
    second = await outcomes("b", list(reversed(range(30))))  # another process, another order
    assert first == second
    assert {ok for ok, _ in first.values()} == {True, False}
    other_seed = PluginRegistry.discover(work_dir=tmp_path / "c")
    try:
        outs = [
            (await other_seed.execute(make_task("create", provider_fields={"failure_rate": "0.5", "seed": "43"}, task_id=f"task-{i}"))).ok
            for i in range(30)
        ]
    finally:
        await other_seed.aclose()
    assert outs != [first[i][0] for i in range(30)]


async def test_a_retry_is_a_new_draw(registry: PluginRegistry) -> None:
    fields = {"failure_rate": "0.5", "seed": "1"}
    draws = {(await registry.execute(make_task("create", provider_fields=fields, attempt=a))).ok for a in range(1, 30)}
    assert draws == {True, False}


@pytest.mark.parametrize(
    ("spec", "low", "high"),
    [("0", 0, 0), ("250", 250, 250), ("150-600", 150, 600), ("lognormal:200:0.8:900", 0, 900)],
)
def test_latency_specs(spec: str, low: float, high: float) -> None:
    import random

    latency = Latency.parse(spec)
    rng = random.Random(3)
    samples = [latency.sample_ms(rng) for _ in range(500)]
    assert all(low <= s <= high for s in samples)


def test_lognormal_latency_has_a_long_tail() -> None:
    import random
    import statistics

    latency = Latency.parse("lognormal:100:1")
    rng = random.Random(5)
    samples = sorted(latency.sample_ms(rng) for _ in range(4000))
    median, p99 = statistics.median(samples), samples[int(0.99 * len(samples))]
    assert 85 < median < 115 and p99 > 5 * median


@pytest.mark.parametrize("spec", ["fast", "600-150", "-5", "lognormal:0:1", "lognormal:100"])
async def test_bad_latency_spec_fails_the_task_with_a_clear_error(registry: PluginRegistry, spec: str) -> None:
    out = await registry.execute(make_task("create", provider_fields={"latency_ms": spec}))
    assert not out.ok and "bad latency" in out.error


async def test_bad_failure_rate_fails_the_task(registry: PluginRegistry) -> None:
    out = await registry.execute(make_task("create", provider_fields={"failure_rate": "often"}))
    assert not out.ok and "failure_rate" in out.error
    out = await registry.execute(make_task("create", provider_fields={"failure_rate": "1.5"}))
    assert not out.ok and "between 0 and 1" in out.error


async def test_latency_is_waited_concurrently(registry: PluginRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    """The 50 latencies are waited at once, on the loop: each wait is held until all 50 are
    waiting, which waits one after another (or a blocking sleep) never reach. (It was timed:
    under 2.5 s for 50 of 0.1 s, 0.68 s once under the whole suite's load.)"""
    waits: list[float] = []
    all_waiting = asyncio.Event()

    async def held(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 50:
            all_waiting.set()
        await asyncio.wait_for(all_waiting.wait(), 30)

    monkeypatch.setattr(simulation, "asyncio", SimpleNamespace(sleep=held))  # (the module's own name only)
    tasks = [make_task("create", provider_fields={"latency_ms": "100"}, task_id=f"t{i}") for i in range(50)]
    outs = await asyncio.gather(*(registry.execute(t) for t in tasks))
    assert all(o.ok for o in outs) and waits == [0.1] * 50


async def test_automator_uses_its_fields_then_the_provider_fields(registry: PluginRegistry) -> None:
    automator = registry.automator("simulated")
    assert isinstance(automator, SimulatedAutomator)
    failing_cloud = {"failure_rate": "1"}
    out = await registry.execute(make_task("start", provider_fields=failing_cloud, service="zk", action_fields={"script": "start zk"}))
    assert not out.ok and out.error == "simulated failure of start (failure rate 1)" and "start zk" in out.stderr
    out = await registry.execute(
        make_task("start", provider_fields=failing_cloud, service="zk", action_fields={"script": "start zk", "failure_rate": "0"})
    )
    assert out.ok
    out = await registry.execute(
        make_task("start", provider_fields={"failure_rate_start": "1"}, service="zk", action_fields={"script": "s"})
    )
    assert not out.ok
    assert [(r.service, r.action, r.ok) for r in automator.runs] == [
        ("zk", Action.START, False),
        ("zk", Action.START, True),
        ("zk", Action.START, False),
    ]


async def test_automator_bootstrap_and_all_service_actions(registry: PluginRegistry) -> None:
    assert (await registry.execute(make_task("bootstrap"))).ok
    for action in ("install", "configure", "initialize", "start", "stop", "remove"):
        out = await registry.execute(make_task(action, service="base", action_fields={"script": f"{action} base"}))
        assert out.ok and f"{action} base" in out.stdout


def test_the_simulated_providers_per_action_fields_are_its_own_for_the_catalog() -> None:
    """docs/plugins.md's way to show a failure, `failure_rate_install: 1` with
    `failure_permanent_install: true` on the provider (the automator reads the provider's fields),
    works; `muster catalog apply` warned each was "not a field of the 'simulated' provider plugin"."""
    from muster.catalog.files import load_catalog
    from muster.catalog.validation import validate_catalog
    from services.provisioner.plugins.specs import catalog_plugins

    catalog = load_catalog(DEMO)
    sim = catalog.providers["sim"]
    fields = {**sim.provisioner, "failure_rate_install": "1", "failure_permanent_install": "true",
              "fail_first_attempts_start": "2", "latency_ms_configure": "50-100", "failure_permanent_delete": True}
    catalog.providers["sim"] = sim.model_copy(update={"provisioner": fields})
    assert [(p.field, p.message) for p in validate_catalog(catalog, catalog_plugins()) if p.kind == "providers"] == []
    fields["failure_rate_install"] = "often"  # declared, so checked too
    problems = [(p.field, p.is_error) for p in validate_catalog(catalog, catalog_plugins()) if p.kind == "providers"]
    assert problems == [("provisioner.failure_rate_install", True)]
