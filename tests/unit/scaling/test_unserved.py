"""Issue #18.7: tasks queued for a tenant no live provisioner serves show on /metrics."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from muster.scaling import unserved, unserved_warning


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


def named(ident: str, klass: str, tenants: tuple[str, ...], draining: bool = False) -> Any:
    return SimpleNamespace(info=SimpleNamespace(id=ident, provisioner_class=klass, tenants=tenants), draining=draining)


WAIT = "3 queued task(s) wait until one registers"


def test_the_warning_says_how_to_find_a_provisioner_that_could_serve_and_the_real_grant() -> None:
    """The warnings said `muster grant <provisioner> ...` (and `queue:<class>` on a job's status):
    a placeholder the reader had to resolve, and no help when nothing of the class ran."""
    live = [named("provisioner", "default", ("default",)), named("gpu-1", "gpu", ("acme",)), named("p2", "default", ("globex",))]
    said = unserved_warning("acme", "default", live, WAIT)
    assert said == ("no live provisioner serves tenant 'acme' (class 'default'): 3 queued task(s) wait until one registers; "
                    "2 live provisioner(s) of class 'default' serve other tenants: a super admin lists them with "
                    "muster provisioners list --all and grants one the queue: "
                    "muster grant PROVISIONER execute --tenant acme --scope queue:default")
    assert "<" not in said
    # another tenant's provisioner is not named to this tenant's users (its id may name its tenant)
    assert "p2" not in said and "globex" not in said
    assert unserved_warning("acme", "gpu", live, WAIT) is None  # gpu-1 serves it


def test_with_no_provisioner_of_the_class_the_warning_says_how_to_start_one() -> None:
    live = [named("provisioner", "default", ("acme",)), named("gpu-1", "gpu", ("acme",), draining=True)]
    said = unserved_warning("acme", "gpu", live, WAIT)
    assert said is not None and "<" not in said
    assert said.startswith("no live provisioner serves tenant 'acme' (class 'gpu'): 3 queued task(s) wait until one "
                           "registers (draining: gpu-1); no provisioner of class 'gpu' is running: a super admin starts one with ")
    assert said.endswith("muster user create prov-gpu --role service --service provisioner --tenant acme --save prov-gpu.cred, "
                         "muster grant prov-gpu execute --tenant acme --scope queue:gpu, "
                         "then MUSTER_CREDENTIALS=prov-gpu.cred muster provisioner --class gpu")
    assert "no provisioner of class 'default' is running" in (unserved_warning("acme", "default", [], WAIT) or "")
