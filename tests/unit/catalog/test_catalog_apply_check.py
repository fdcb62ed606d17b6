"""Planning an apply against the catalog in the log (no broker): changes, versions, what blocks."""

from __future__ import annotations

from pathlib import Path

from contracts.catalog import Catalog, Service
from muster.catalog.files import load_catalog
from muster.catalog.store import CatalogState, changed_fields, check_apply, plan_changes

DEMO = Path(__file__).parents[3] / "muster" / "demo" / "catalog"


def state_of(catalog: Catalog, version: int = 1) -> CatalogState:
    versions = {(k, n): version for k in ("providers", "hardwaretypes", "imagetypes", "services", "clustertemplates")
                for n in catalog.entities(k)}
    return CatalogState(catalog=catalog, last_seq=42, versions=versions)


def test_only_what_differs_is_applied_and_versions_count_up() -> None:
    demo = load_catalog(DEMO)
    assert plan_changes(state_of(demo, 3), load_catalog(DEMO)) == []  # the file's "version" is not compared
    changed = load_catalog(DEMO)
    changed.services["base"] = changed.services["base"].model_copy(update={"description": "new", "version": 9})
    changed.services["extra"] = Service(name="extra")
    changes = {c.name: c for c in plan_changes(state_of(demo, 3), changed)}
    assert set(changes) == {"base", "extra"}
    assert (changes["base"].action, changes["base"].version, changes["base"].fields) == ("change", 4, ("description",))
    assert changes["base"].body["version"] == 4 and changes["extra"].version == 1 and changes["extra"].action == "add"


def test_a_change_that_breaks_an_entity_in_the_log_is_refused_naming_it() -> None:
    demo = load_catalog(DEMO)
    namenode = demo.services["hdfs-namenode"]
    broken = Catalog(services={"hdfs-namenode": namenode.model_copy(
        update={"dependencies": namenode.dependencies.model_copy(update={"conflicts": ["hdfs-namenode"]})})})
    check = check_apply(state_of(demo), broken, None, {("services", "hdfs-namenode"): "svc.json"}, log_label="the log")
    assert not check.ok
    assert [(p.source, p.name, p.field) for p in check.errors] == [("svc.json", "hdfs-namenode", "dependencies.conflicts")]


def test_errors_the_log_already_had_do_not_block_but_are_shown() -> None:
    demo = load_catalog(DEMO)
    bad = demo.model_copy(deep=True)
    t = bad.clustertemplates["hadoop-small"]
    bad.clustertemplates["hadoop-small"] = t.model_copy(update={"defaults": t.defaults.model_copy(update={"provider": "gone"})})
    # The log holds the bad template; re-applying it unchanged with a new service is fine.
    incoming = Catalog(clustertemplates=dict(bad.clustertemplates), services={"extra": Service(name="extra")})
    check = check_apply(state_of(bad), incoming, None)
    assert check.ok and [c.name for c in check.changes] == ["extra"]
    assert any("already so in the log" in p.message for p in check.warnings)


def test_changed_fields_are_dotted_paths() -> None:
    old = {"a": {"b": 1, "c": [1]}, "d": 1}
    new = {"a": {"b": 2, "c": [1], "e": 0}, "f": 1}
    assert changed_fields(old, new) == ["a.b", "a.e", "d", "f"]
