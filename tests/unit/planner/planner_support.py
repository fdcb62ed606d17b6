"""Small builders for planner tests: services and nodes without files."""

from __future__ import annotations

from collections.abc import Iterable

from contracts.catalog import Action, Service
from contracts.layout import NodeSpec

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


def actions(plan_tasks: Iterable[object]) -> list[str]:
    return [t.id for t in plan_tasks]  # type: ignore[attr-defined]


A = Action
