"""A catalog naming an automator no provisioner offers (Coopr's `chef-solo`) is refused at apply by a
real planner, one reason per service naming the plugin; once a provisioner that loaded such a
plugin (`--plugins-dir`) is live, the same apply is accepted (docs/decisions/0023)."""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from contracts.catalog_requests import ApplyCatalog
from muster.bus.connect import connect
from muster.bus.streams import ensure_streams
from muster.catalog.files import load_catalog
from muster.catalog.requests import ask_planner
from services.planner.app import PlannerConfig
from services.planner.entrypoint import start_planner
from services.provisioner.app import Provisioner
from services.provisioner.plugins import PluginRegistry
from services.provisioner.worker import WorkerConfig

DEMO = Path(__file__).parents[3] / "muster" / "demo" / "catalog"
TENANT = "chef"
CHEF_SERVICES = ("hdfs-namenode", "zookeeper-server")

CHEF_PLUGIN = {"name": "chef-solo", "type": "automator", "version": "0.1", "description": "a site's own chef-solo runner",
               "actions": ["install", "configure", "initialize", "start", "stop", "remove"],
               "entry_point": "automator:ChefSolo", "fields": {"run_list": {"label": "Run list", "type": "text"}}}
CHEF_CODE = """
from services.provisioner.plugins import AutomatorPlugin, succeeded

class ChefSolo(AutomatorPlugin):
    async def run(self, action, ctx):
        return succeeded(stdout=f"chef-solo {ctx.fields.get('run_list')}")
"""


def chef_catalog() -> ApplyCatalog:
    """The demo catalog with two services' actions on chef-solo, as a Coopr catalog has them."""
    catalog = load_catalog(DEMO)
    for name in CHEF_SERVICES:
        svc = catalog.services[name]
        actions = {a: s.model_copy(update={"type": "chef-solo", "fields": {"run_list": f"recipe[{name}]"}})
                   for a, s in svc.provisioner.actions.items()}
        catalog.services[name] = svc.model_copy(update={"provisioner": svc.provisioner.model_copy(update={"actions": actions})})
    return ApplyCatalog(catalog=catalog.model_dump(mode="json"), requested_by="test")


@pytest.mark.timeout(60)
async def test_chef_solo_is_refused_per_service_until_a_provisioner_offers_it(fresh_nats: str, tmp_path: Path) -> None:
    plugin = tmp_path / "plugins" / "chef-solo"
    plugin.mkdir(parents=True)
    (plugin / "plugin.json").write_text(json.dumps(CHEF_PLUGIN))
    (plugin / "automator.py").write_text(CHEF_CODE)
    async with AsyncExitStack() as stack:
        ncs = [await connect(fresh_nats, name=n) for n in ("planner", "provisioner", "client")]
        for nc in ncs:
            stack.push_async_callback(nc.close)
        await ensure_streams(ncs[0].jetstream())
        await start_planner(ncs[0], stack, PlannerConfig(instance="planner-chef"))

        refused = await ask_planner(ncs[2], TENANT, chef_catalog())
        assert refused is not None and not refused.ok
        errors = [p for p in refused.problems if p.severity == "error"]
        assert sorted(p.entity for p in errors) == sorted(CHEF_SERVICES)  # one reason per service
        for p in errors:
            assert p.field == "provisioner.actions" and "automator plugin 'chef-solo', which no provisioner offers" in p.message
            assert "move the actions to shell or ansible" in p.message

        registry = PluginRegistry.discover(extra_dirs=[tmp_path / "plugins"], work_dir=tmp_path / "work")
        stack.push_async_callback(registry.aclose)
        provisioner = Provisioner(ncs[1], registry, WorkerConfig(provisioner_id="prov-chef", tenants=(TENANT,)))
        await provisioner.start()  # its presence record names chef-solo among its plugins
        stack.push_async_callback(provisioner.stop)

        accepted = await ask_planner(ncs[2], TENANT, chef_catalog())
        assert accepted is not None
        assert accepted.ok, accepted.problems
        assert {c["name"] for c in accepted.changes} >= set(CHEF_SERVICES)
