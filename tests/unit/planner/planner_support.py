"""Small builders for planner tests: services and nodes without files."""

from __future__ import annotations

from collections.abc import Iterable

from contracts.catalog import Action, Service
from contracts.layout import NodeSpec
from services.planner.domain.model import Plan
from services.planner.domain.scheduling import Dispatcher

ALL_ACTIONS = ("install", "configure", "initialize", "start", "stop", "remove")


def svc(
    name: str,
    actions: Iterable[str] = ALL_ACTIONS,
    *,
    install: Iterable[str] = (),
    runtime: Iterable[str] = (),
    install_uses: Iterable[str] = (),
    runtime_uses: Iterable[str] = (),
    provides: Iterable[str] = (),
) -> Service:
    return Service.model_validate(
        {
            "name": name,
            "dependencies": {
                "provides": list(provides),
                "install": {"requires": list(install), "uses": list(install_uses)},
                "runtime": {"requires": list(runtime), "uses": list(runtime_uses)},
            },
            "provisioner": {"actions": {a: {"type": "shell", "fields": {"script": f"{a} {name}"}} for a in actions}},
        }
    )


def catalog(*services: Service) -> dict[str, Service]:
    return {s.name: s for s in services}


def node(node_id: str, *services: str) -> NodeSpec:
    return NodeSpec(id=node_id, hardwaretype="medium", imagetype="ubuntu22", services=list(services))




# -- Coopr's ServiceDependencyResolverTest catalogs (coopr-facts §4.5) ----------------------------


def coopr_minimize() -> dict[str, Service]:
    """testMinimizeDependencies."""
    return catalog(
        svc("base"),
        svc("s1", runtime=["base"]),
        svc("s2", runtime=["base", "s1"]),
        svc("s3", runtime=["base", "s1", "s2"]),
        svc("s4", runtime=["base"]),
        svc("s5", runtime=["base", "s1", "s2", "s3", "s4"]),
    )


def coopr_runtime() -> dict[str, Service]:
    """testClusterRuntimeDependencies."""
    return catalog(
        svc("s1", ["initialize", "start"]),
        svc("s2", ["configure", "initialize"], runtime=["s1"]),
        svc("s3", ["start"], runtime=["s1"]),
        svc("s4", ["initialize", "start"], runtime=["s2", "s3", "s6"]),
        svc("s5", ["initialize", "start"]),
        svc("s6", ["initialize"], runtime=["s5"]),
    )


def coopr_install() -> dict[str, Service]:
    """testClusterInstallDependencies."""
    return catalog(
        svc("s1", ["install"]),
        svc("s2", ["configure"], install=["s1"]),
        svc("s3", ["install"], install=["s1"]),
        svc("s4", ["install"], install=["s2", "s3", "s6"]),
        svc("s5", ["install"]),
        svc("s6", ["configure"], install=["s5"]),
    )


def coopr_uses() -> dict[str, Service]:
    """testServiceUsesDependency: s3 is in the catalog; tests leave it off the cluster."""
    return catalog(svc("s1", ["install"]), svc("s2", ["install"], install_uses=["s1", "s3"]), svc("s3", ["install"]))


# -- rollback tests ---------------------------------------------------------------------------


def base_b_a() -> dict[str, Service]:
    """`base` (install, configure only); `b` on it; `a` needs b installed and running."""
    return catalog(svc("base", ["install", "configure"]), svc("b", install=["base"]), svc("a", install=["b"], runtime=["b"]))


def run_until(plan: Plan, stop_after: int) -> set[str]:
    """Task ids an eager run has completed after `stop_after` completions."""
    dispatcher = Dispatcher(plan)
    running = dispatcher.start()
    while running and len(dispatcher.done) < stop_after:
        running.extend(dispatcher.finished(running.pop(0)))
    return set(dispatcher.done)


def ran(plan: Plan, done: set[str], state: dict[tuple[str, str], str]) -> None:
    """What a plan's `done` tasks leave of each service's state, in plan order (running,
    stopped, absent; a machine deleted takes its node's services)."""
    after = {Action.START: "running", Action.STOP: "stopped", Action.REMOVE: "absent"}
    for t in plan.tasks:
        if t.id not in done:
            continue
        if t.action is Action.DELETE:
            for key in [k for k in state if k[0] == t.node]:
                state[key] = "gone"
        elif t.service and t.action in after:
            state[(t.node, t.service)] = after[t.action]
        elif t.service and t.action is Action.INSTALL and state.get((t.node, t.service), "absent") == "absent":
            state[(t.node, t.service)] = "stopped"
