"""Issue #18.7: tasks queued for a tenant no live provisioner serves show on /metrics."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from muster.scaling import unserved


def presence(klass: str, tenants: tuple[str, ...], draining: bool = False) -> Any:
    return SimpleNamespace(info=SimpleNamespace(provisioner_class=klass, tenants=tenants), draining=draining)


def queue(tenant: str, klass: str, queued: int) -> dict[str, Any]:
    return {"tenant": tenant, "class": klass, "queue_length": queued}


def test_queued_tasks_of_a_tenant_and_class_nobody_serves_are_counted() -> None:
    answers = [{"planner": "p1", "queues": [queue("acme", "default", 3), queue("globex", "default", 2), queue("acme", "gpu", 4),
                                            queue("idle", "default", 0), {"tenant": "odd"}]},
               {"planner": "p2", "queues": [queue("acme", "gpu", 1)]}]
    live = [presence("default", ("acme",)), presence("default", ("globex",), draining=True), presence("gpu", ("initech",))]
    assert unserved(answers, live) == {("globex", "default"): 2, ("acme", "gpu"): 5}
    assert unserved(answers, []) == {("acme", "default"): 3, ("globex", "default"): 2, ("acme", "gpu"): 5}
