"""A catalog is checked against the built-in plugins plus what live provisioners offer: a service
naming `chef-solo` is refused at apply unless a provisioner registered a plugin of that name."""

from __future__ import annotations

from pathlib import Path

from contracts.catalog import Catalog
from muster.catalog.files import load_catalog
from muster.catalog.validation import validate_catalog
from services.planner.catalog import offered_specs
from services.provisioner.plugins.specs import catalog_plugins

DEMO = Path(__file__).parents[3] / "muster" / "demo" / "catalog"
CHEF = {"name": "chef-solo", "type": "automator", "version": "1", "actions": ["install"],
        "fields": {"recipe": {"label": "Recipe", "type": "text", "required": True, "sensitive": False}}}


def chef_catalog() -> Catalog:
    catalog = load_catalog(DEMO)
    svc = catalog.services["base"]
    actions = {a: s.model_copy(update={"type": "chef-solo", "fields": {}}) for a, s in svc.provisioner.actions.items()}
    catalog.services["base"] = svc.model_copy(update={"provisioner": svc.provisioner.model_copy(update={"actions": actions})})
    return catalog


def test_a_plugin_a_live_provisioner_offers_is_known_with_its_fields() -> None:
    known = catalog_plugins()
    refused = [p for p in validate_catalog(chef_catalog(), known) if p.is_error]
    assert [(p.name, p.field) for p in refused] == [("base", "provisioner.actions")]
    assert "'chef-solo', which no provisioner offers" in refused[0].message
    offered = offered_specs(known, [CHEF, {"name": "shell", "type": "automator"}, {"name": "x", "type": "bogus"}])
    assert offered.automators["chef-solo"].fields["recipe"].required
    assert offered.automators["shell"] is known.automators["shell"]  # the built-in descriptor wins
    problems = [p for p in validate_catalog(chef_catalog(), offered) if p.is_error]
    assert [(p.field, p.message) for p in problems] == [
        (f"provisioner.actions.{a}.fields.recipe", "the 'chef-solo' automator requires this field") for a in ("configure", "install")]
    assert offered_specs(known, []) is known
