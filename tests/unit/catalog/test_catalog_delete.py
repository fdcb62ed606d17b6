"""What keeps a catalog entity from being deleted (#17.6): the rest of the catalog (the errors
its absence would add) and live clusters (template, provider, nodes' hardware, image, services)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from contracts.catalog import Catalog, Service
from contracts.events import ClusterLayoutChanged, ClusterRequested, ClusterStatusChanged
from contracts.layout import NodeSpec
from muster.catalog.delete import catalog_uses, cluster_uses
from muster.catalog.files import load_catalog
from muster.readmodel.clusters import ClusterState

DEMO = Path(__file__).parents[3] / "muster" / "demo" / "catalog"


def _catalog() -> Catalog:
    catalog = load_catalog(DEMO)
    catalog.services["extra"] = Service.model_validate({"name": "extra", "provisioner": {"actions": {}}})
    return catalog


def test_what_the_catalog_still_needs_is_named() -> None:
    catalog = _catalog()
    assert catalog_uses(catalog, "services", "extra") == []
    provider = catalog_uses(catalog, "providers", "sim")
    assert provider and all("hadoop-small" in reason or "sim" in reason for reason in provider)
    assert any("defaults.provider" in reason for reason in provider)
    zookeeper = catalog_uses(catalog, "services", "zookeeper-server")
    assert any("cluster template 'hadoop-small'" in reason for reason in zookeeper)
    assert catalog_uses(catalog, "clustertemplates", "hadoop-small") == []


def _cluster(status: Literal["active", "deleted"] = "active") -> ClusterState:
    c = ClusterState()
    c.apply(ClusterRequested(tenant="t", cluster_id="c1", name="web", template="hadoop-small", provider="sim", job_id="j"))
    c.apply(ClusterLayoutChanged(cluster_id="c1", job_id="j", nodes=[
        NodeSpec(id="n1", hardwaretype="large", imagetype="centos7", services=["base", "extra"]),
        NodeSpec(id="n2", hardwaretype="large", imagetype="ubuntu22", services=["base"])]))
    c.apply(ClusterStatusChanged(cluster_id="c1", job_id="j", status=status))
    return c


def test_a_live_cluster_keeps_what_it_uses() -> None:
    live = [_cluster()]
    assert cluster_uses(live, "services", "extra") == ["live cluster 'web' (c1) uses it: a service on 1 node(s)"]
    assert cluster_uses(live, "hardwaretypes", "large") == ["live cluster 'web' (c1) uses it: the hardware type of 2 node(s)"]
    assert cluster_uses(live, "imagetypes", "centos7") == ["live cluster 'web' (c1) uses it: the image type of 1 node(s)"]
    assert cluster_uses(live, "providers", "sim") == ["live cluster 'web' (c1) uses it: its provider"]
    assert cluster_uses(live, "clustertemplates", "hadoop-small") == ["live cluster 'web' (c1) uses it: its template"]
    assert cluster_uses(live, "hardwaretypes", "small") == []
    assert cluster_uses([_cluster("deleted")], "services", "extra") == []
