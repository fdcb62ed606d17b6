"""Builders for the solver tests: Coopr's reactor-medium catalog (a folder under
tests/fixtures/catalogs) and small in-memory catalogs. The name is unique in tests/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from contracts.catalog import Catalog
from contracts.layout import Layout
from muster.catalog.files import load_catalog
from services.solver.domain import SolveRequest, solve

REACTOR_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "catalogs" / "reactor-medium"
REACTOR_SERVICES = ["namenode", "datanode", "resourcemanager", "nodemanager", "hbasemaster", "regionserver", "zookeeper", "reactor"]


def reactor_catalog() -> Catalog:
    return load_catalog(REACTOR_DIR)


def groups(layout: Layout) -> list[tuple[str, str, tuple[str, ...], int]]:
    return [(g.hardwaretype, g.imagetype, tuple(g.services), g.count) for g in layout.layout]


def counts_by_services(layout: Layout) -> dict[frozenset[str], int]:
    return {frozenset(g.services): g.count for g in layout.layout}


def make_catalog(
    services: list[str] | dict[str, dict[str, Any]],
    template: dict[str, Any] | None = None,
    hardware: dict[str, dict[str, str]] | None = None,
    images: dict[str, dict[str, str]] | None = None,
    provider: str = "p",
) -> Catalog:
    """A catalog with one provider `p`, hardware `hw` and image `img` unless given, and one
    template `t` (defaults: every service, provider p)."""
    hardware = hardware if hardware is not None else {"hw": {"flavor": "f"}}
    images = images if images is not None else {"img": {"image": "i"}}
    service_specs = services if isinstance(services, dict) else {s: {} for s in services}
    body: dict[str, Any] = {"name": "t", **(template or {})}
    body.setdefault("defaults", {})
    body["defaults"].setdefault("services", list(service_specs))
    body["defaults"].setdefault("provider", provider)
    return Catalog.model_validate(
        {
            "providers": {provider: {"name": provider, "providertype": "x"}},
            "hardwaretypes": {n: {"name": n, "providermap": {provider: f}} for n, f in hardware.items()},
            "imagetypes": {n: {"name": n, "providermap": {provider: f}} for n, f in images.items()},
            "services": {n: {"name": n, **spec} for n, spec in service_specs.items()},
            "clustertemplates": {"t": body},
        }
    )


def solve_t(catalog: Catalog, nodes: int, **kw: Any) -> Layout:
    return solve(catalog, SolveRequest(template=kw.pop("template", "t"), nodes=nodes, **kw))
