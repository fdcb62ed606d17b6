"""Catalog entities read Coopr's JSON format; bad input names the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from contracts.catalog import Action, ClusterTemplate, HardwareType, Service
from muster.catalog.files import CatalogFileError, load_catalog
from muster.catalog.templates import TemplateError, resolve_template

DEMO = Path(__file__).parents[3] / "muster" / "demo" / "catalog"

DATANODE = {  # coopr-templates services/hadoop-hdfs-datanode.json, trimmed as in coopr-facts §1.5
    "name": "hadoop-hdfs-datanode", "description": "Hadoop HDFS DataNode",
    "dependencies": {
        "conflicts": [], "provides": ["hadoop-client"],
        "install": {"requires": ["base"], "uses": ["kerberos-client"]},
        "runtime": {"requires": ["hadoop-hdfs-namenode"], "uses": ["hadoop-hdfs-secondarynamenode", "kerberos-master"]},
    },
    "provisioner": {"actions": {
        "install": {"type": "chef-solo", "fields": {"run_list": "recipe[hadoop::hadoop_hdfs_datanode]"}},
        "start": {"type": "chef-solo", "fields": {"run_list": "x", "json_attributes": "{}"}},
    }},
}


def test_coopr_service_reads_as_is() -> None:
    s = Service.model_validate(DATANODE)
    assert s.dependencies.requires == {"base", "hadoop-hdfs-namenode"}
    assert s.dependencies.provides == ["hadoop-client"]
    assert s.has_action(Action.INSTALL) and not s.has_action(Action.CONFIGURE)
    assert s.provisioner.actions[Action.START].fields["run_list"] == "x"
    assert s.version == 1  # Coopr's default when absent


def test_hardware_cost_numbers_become_text_and_parse_back() -> None:
    hw = HardwareType.model_validate({"name": "large", "providermap": {"aws": {"flavor": "m1.large", "cost": 0.175}}})
    assert hw.providermap["aws"]["cost"] == "0.175"
    assert hw.cost("aws") == pytest.approx(0.175) and hw.flavor("aws") == "m1.large" and hw.flavor("gce") is None


def test_template_defaults_fold_service_objects_into_config() -> None:
    t = ClusterTemplate.model_validate(
        {"name": "t", "defaults": {"services": ["base", {"name": "mysql", "config": {"port": 3306}}], "config": {"a": 1}}}
    )
    assert t.defaults.services == ["base", "mysql"]
    assert t.defaults.config == {"a": 1, "mysql": {"port": 3306}}


def test_service_constraint_without_quantities_uses_defaults() -> None:
    # Coopr's codec throws a NullPointerException here (coopr-facts §1.6).
    t = ClusterTemplate.model_validate({"name": "t", "constraints": {"services": {"zk": {"hardwaretypes": ["small"]}}}})
    q = t.constraints.services["zk"].quantities
    assert (q.min, q.max) == (0, None)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"name": "t", "constraints": {"services": {"zk": {"quantities": {"min": "many"}}}}}, "constraints.services.zk.quantities.min"),
        ({"name": "t", "constraints": {"size": {"min": 0}}}, "constraints.size.min"),
        ({"name": "bad name!"}, "name"),
        ({"name": "t", "constraints": {"services": {"zk": {"quantities": {"ratio": {"min": 150}}}}}}, "constraints.services.zk.quantities.ratio.min"),
    ],
)
def test_invalid_template_names_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        ClusterTemplate.model_validate(data)
    locs = [".".join(str(p) for p in e["loc"]) for e in err.value.errors()]
    assert field in locs


def test_min_greater_than_max_is_refused() -> None:
    with pytest.raises(ValidationError, match="min 3 is greater than max 1"):
        ClusterTemplate.model_validate({"name": "t", "constraints": {"services": {"zk": {"quantities": {"min": 3, "max": 1}}}}})


def test_machine_actions_are_not_service_actions() -> None:
    with pytest.raises(ValidationError, match="machine actions"):
        Service.model_validate({"name": "s", "provisioner": {"actions": {"create": {"type": "shell"}}}})


def test_demo_catalog_folder_loads() -> None:
    c = load_catalog(DEMO)
    assert set(c.clustertemplates) == {"hadoop-small"}
    assert c.providers["sim"].providertype == "simulated"
    assert "hdfs-datanode" in c.services


def test_catalog_file_errors_name_file_and_field(tmp_path: Path) -> None:
    (tmp_path / "hardwaretypes").mkdir()
    bad = tmp_path / "hardwaretypes" / "x.json"
    bad.write_text(json.dumps({"name": "x", "providermap": {"p": "not a map"}}))
    with pytest.raises(CatalogFileError) as err:
        load_catalog(tmp_path)
    assert str(bad) in str(err.value) and "providermap.p" in str(err.value)
    bad.write_text("{ not json")
    with pytest.raises(CatalogFileError, match="not valid JSON"):
        load_catalog(tmp_path)


def test_yaml_entities_load(tmp_path: Path) -> None:
    (tmp_path / "imagetypes").mkdir()
    (tmp_path / "imagetypes" / "u.yaml").write_text("name: u\nprovidermap:\n  sim: {image: img-1}\n")
    assert load_catalog(tmp_path).imagetypes["u"].image("sim") == "img-1"


def _catalog(tmp_path: Path, templates: dict[str, dict[str, object]], partials: dict[str, dict[str, object]] | None = None):
    for folder, entities in (("clustertemplates", templates), ("partialtemplates", partials or {})):
        (tmp_path / folder).mkdir(exist_ok=True)
        for name, body in entities.items():
            (tmp_path / folder / f"{name}.json").write_text(json.dumps({"name": name, **body}))
    return load_catalog(tmp_path)


def test_extends_and_includes_merge(tmp_path: Path) -> None:
    catalog = _catalog(
        tmp_path,
        {
            "parent": {"defaults": {"services": ["base"], "provider": "p", "config": {"a": {"x": 1, "y": 1}}},
                       "constraints": {"size": {"min": 3}}},
            "child": {"extends": {"name": "parent"}, "includes": [{"name": "sensu"}],
                      "defaults": {"services": ["hdfs"], "config": {"a": {"y": 2}}}},
        },
        {"sensu": {"immutable": True, "defaults": {"services": ["sensu"], "config": {"sensu": {"url": "u"}}}}},
    )
    t = resolve_template(catalog, "child")
    assert t.defaults.services == ["base", "sensu", "hdfs"]
    assert t.defaults.config == {"a": {"x": 1, "y": 2}, "sensu": {"url": "u"}}
    assert t.defaults.provider == "p" and t.constraints.size.min == 3
    assert t.extends is None and t.includes == []


def test_immutable_partial_config_cannot_be_overridden(tmp_path: Path) -> None:
    catalog = _catalog(
        tmp_path,
        {"t": {"includes": [{"name": "p"}], "defaults": {"config": {"sensu": {"url": "mine"}}}}},
        {"p": {"immutable": True, "defaults": {"config": {"sensu": {"url": "u"}}}}},
    )
    with pytest.raises(TemplateError, match="immutable"):
        resolve_template(catalog, "t")


def test_extends_cycle_is_named(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path, {"a": {"extends": {"name": "b"}}, "b": {"extends": {"name": "a"}}})
    with pytest.raises(TemplateError, match="a -> b -> a"):
        resolve_template(catalog, "a")
