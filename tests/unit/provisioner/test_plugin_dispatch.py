"""How tasks reach plugins (coopr-facts §5.3), timeouts, crashes, bootstrap merging."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from contracts.tasks import OUTPUT_LIMIT
from services.provisioner.plugins import PluginRegistry
from services.provisioner.plugins.testing import make_task

RECORDER = '''
import asyncio
from services.provisioner.plugins import AutomatorPlugin, ProviderPlugin, succeeded, failed

class Recorder(AutomatorPlugin):
    async def run(self, action, ctx):
        mode = ctx.fields.get("mode", "")
        if mode == "hang":
            await asyncio.Event().wait()
        if mode == "crash":
            raise RuntimeError("boom in plugin")
        if mode == "loud":
            return succeeded(stdout="x" * 100_000, stderr="y" * 100_000)
        if mode == "not-an-outcome":
            return {"ok": True}
        if mode == "own-timeout":
            raise TimeoutError("ssh connect took too long")
        return succeeded({self.descriptor.name: action.value, "shared": self.descriptor.name},
                         ipaddresses={"via": self.descriptor.name}, stdout=f"{self.descriptor.name} {action.value}")

class Failer(AutomatorPlugin):
    async def run(self, action, ctx):
        return failed("nope", stdout="failer out")
'''


def automator(folder: Path, name: str, cls: str = "Recorder", actions: list[str] | None = None) -> None:
    folder.mkdir(parents=True)
    (folder / "plugin.json").write_text(
        json.dumps(
            {
                "name": name,
                "type": "automator",
                "version": "1",
                "actions": actions or ["bootstrap", "install", "start"],
                "entry_point": f"code:{cls}",
                "fields": {"mode": {"label": "Mode"}},
            }
        )
    )
    (folder / "code.py").write_text(RECORDER)


@pytest.fixture
async def reg(tmp_path: Path):
    automator(tmp_path / "p" / "one", "one")
    automator(tmp_path / "p" / "two", "two")
    automator(tmp_path / "p" / "failer", "failer", cls="Failer")
    automator(tmp_path / "p" / "nobootstrap", "nobootstrap", actions=["install"])
    r = PluginRegistry.discover([tmp_path / "p"], work_dir=tmp_path / "w")
    yield r
    await r.aclose()


async def test_service_action_goes_to_the_automator_named_by_the_action_type(reg: PluginRegistry) -> None:
    out = await reg.execute(make_task("install", service="svc", automator="two"))
    assert out.ok and out.result == {"two": "install", "shared": "two"} and out.stdout == "two install"


async def test_unknown_automator_fails_with_the_list_of_automators(reg: PluginRegistry) -> None:
    out = await reg.execute(make_task("install", service="svc", automator="chef-solo"))
    assert not out.ok
    assert "no automator plugin 'chef-solo'" in out.error and "one" in out.error


async def test_action_the_automator_does_not_declare_fails(reg: PluginRegistry) -> None:
    out = await reg.execute(make_task("configure", service="svc", automator="one"))
    assert not out.ok and "does not handle 'configure'" in out.error


async def test_service_action_without_service_fails(reg: PluginRegistry) -> None:
    out = await reg.execute(make_task("install"))
    assert not out.ok and "has no service" in out.error


async def test_unknown_provider_fails(reg: PluginRegistry) -> None:
    out = await reg.execute(make_task("create", providertype="ec2"))
    assert not out.ok and "no provider plugin 'ec2'" in out.error and "simulated" in out.error


async def test_bootstrap_runs_every_automator_of_the_node_and_merges(reg: PluginRegistry) -> None:
    out = await reg.execute(make_task("bootstrap", automators=["one", "nobootstrap", "two"]))
    assert out.ok, out.error
    assert out.result == {"one": "bootstrap", "two": "bootstrap", "shared": "two"}  # later wins
    assert out.ipaddresses == {"via": "two"}
    assert out.stdout == "one bootstrap\ntwo bootstrap"


async def test_bootstrap_stops_at_the_first_failure_and_keeps_output(reg: PluginRegistry) -> None:
    out = await reg.execute(make_task("bootstrap", automators=["one", "failer", "two"]))
    assert not out.ok
    assert out.error == "bootstrap by 'failer': nope"
    assert out.stdout == "one bootstrap\nfailer out"


async def test_bootstrap_with_an_unknown_automator_fails(reg: PluginRegistry) -> None:
    out = await reg.execute(make_task("bootstrap", automators=["one", "puppet"]))
    assert not out.ok and "no automator plugin 'puppet'" in out.error


async def test_bootstrap_with_no_automators_succeeds(reg: PluginRegistry) -> None:
    assert (await reg.execute(make_task("bootstrap", automators=[]))).ok


async def test_task_timeout_is_enforced(reg: PluginRegistry) -> None:
    task = make_task("install", service="svc", automator="one", action_fields={"mode": "hang"}, timeout_s=0.05)
    out = await asyncio.wait_for(reg.execute(task), 5)
    assert not out.ok and out.error == "install timed out after 0.05 s"


async def test_a_timeout_raised_inside_a_plugin_is_not_mistaken_for_the_task_timeout(reg: PluginRegistry) -> None:
    out = await reg.execute(make_task("install", service="s", automator="one", action_fields={"mode": "own-timeout"}))
    assert not out.ok and "inside the plugin" in out.error


async def test_a_crashing_plugin_becomes_a_failed_outcome(reg: PluginRegistry) -> None:
    out = await reg.execute(make_task("install", service="s", automator="one", action_fields={"mode": "crash"}))
    assert not out.ok and out.error == "plugin error: RuntimeError: boom in plugin"


async def test_a_plugin_returning_something_else_fails(reg: PluginRegistry) -> None:
    out = await reg.execute(make_task("install", service="s", automator="one", action_fields={"mode": "not-an-outcome"}))
    assert not out.ok and "not a TaskOutcome" in out.error


async def test_output_is_trimmed(reg: PluginRegistry) -> None:
    out = await reg.execute(make_task("install", service="s", automator="one", action_fields={"mode": "loud"}))
    assert out.ok
    for text in (out.stdout, out.stderr):
        assert len(text.encode()) < OUTPUT_LIMIT + 100 and "bytes trimmed" in text


async def test_cancellation_of_the_worker_propagates(reg: PluginRegistry) -> None:
    task = make_task("install", service="svc", automator="one", action_fields={"mode": "hang"})
    running = asyncio.ensure_future(reg.execute(task))
    await asyncio.sleep(0)  # let it start
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running


async def test_closed_registry_refuses_tasks(tmp_path: Path) -> None:
    r = PluginRegistry.discover(work_dir=tmp_path)
    await r.aclose()
    with pytest.raises(RuntimeError, match="closed"):
        await r.execute(make_task("create"))
