"""The pure packages stay pure: importing them pulls in no NATS client, no service and no
planner aggregate (each checked in a fresh interpreter, so nothing imported by other tests
hides a dependency)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PURE = {
    "contracts (the wire)": (["contracts.commands", "contracts.events", "contracts.records", "contracts.subjects",
                              "contracts.errors", "contracts.catalog"], ("nats", "services", "muster", "eventsourcing")),
    "the read model": (["muster.readmodel.jobs", "muster.readmodel.story", "muster.readmodel.progress", "muster.readmodel.status",
                        "muster.readmodel.clusters", "muster.readmodel.timeline", "muster.readmodel.locations",
                        "muster.readmodel.observed"],
                       ("nats", "services", "eventsourcing", "aiohttp")),
    "the catalog's pure core": (["muster.catalog.validation", "muster.catalog.templates", "muster.catalog.files",
                                 "muster.catalog.sensitive", "muster.catalog.plugins", "muster.catalog.needs"], ("nats", "services", "muster.bus")),
    "config macros": (["muster.macros"], ("nats", "services", "muster.bus", "eventsourcing")),
    "the bus-less CLI front end": (["muster.cli_support"], ("nats", "services", "muster.bus", "muster.client")),
    "where tenants' URLs may go": (["muster.destinations"], ("nats", "services", "muster.bus", "aiohttp", "eventsourcing")),
    "the provisioner worker's core": (["services.provisioner.domain.core", "services.provisioner.domain.secrets"],
                                      ("nats", "muster.bus", "asyncio", "structlog", "services.provisioner.worker")),
    "governance's pure cores": (["services.governance.domain.policies", "services.governance.domain.approvals",
                                 "services.governance.domain.cost", "services.governance.domain.schedules",
                                 "services.governance.domain.entities", "services.governance.domain.inputs",
                                 "services.governance.domain.deliveries", "services.governance.domain.references",
                                 "services.notifier.domain.notices", "services.notifier.domain.signing",
                                 "services.notifier.domain.secrets"],
                                ("nats", "muster.bus", "eventsourcing", "aiohttp", "services.planner")),
}


@pytest.mark.parametrize("what", sorted(PURE))
def test_a_pure_package_imports_none_of_the_layers_it_must_not(what: str) -> None:
    modules, forbidden = PURE[what]
    code = f"import json, sys\nfor m in {modules!r}: __import__(m)\nprint(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    bad = [m for m in loaded if any(m == f or m.startswith(f + ".") for f in forbidden)]
    assert bad == [], f"{what} imports {bad}"
