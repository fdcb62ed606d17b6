"""Reading catalogs from folders and files: every problem names the file, the entity, the field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from muster.catalog.files import load_sources

DEMO = Path(__file__).parents[3] / "muster" / "demo" / "catalog"


def test_a_coopr_folder_loads_with_the_source_of_every_entity() -> None:
    loaded = load_sources([DEMO])
    assert loaded.problems == [] and loaded.count == 13
    assert loaded.source("services", "base") == str(DEMO / "services" / "base.json")


def test_every_file_problem_is_reported_not_only_the_first(tmp_path: Path) -> None:
    (tmp_path / "services").mkdir()
    (tmp_path / "clustertemplates").mkdir()
    (tmp_path / "services" / "broken.json").write_text("{ nope")
    (tmp_path / "services" / "bad.yaml").write_text("name: bad\ndependencies:\n  install:\n    requires: 5\n")
    (tmp_path / "clustertemplates" / "t.json").write_text(json.dumps({"name": "t", "constraints": {"size": {"min": 5, "max": 2}}}))
    problems = {Path(p.source).name: p for p in load_sources([tmp_path]).problems}
    assert set(problems) == {"broken.json", "bad.yaml", "t.json"}
    assert "not valid JSON" in problems["broken.json"].message
    bad = problems["bad.yaml"]
    assert (bad.kind, bad.name, bad.field) == ("services", "bad", "dependencies.install.requires")
    assert str(bad).startswith(f"{tmp_path / 'services' / 'bad.yaml'}: service 'bad', field dependencies.install.requires:")
    assert "size min 5 is greater than size max 2" in problems["t.json"].message
    assert problems["t.json"].field == "constraints.size"


def test_a_bundle_file_and_kind_tagged_yaml_documents_load(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle.json"
    bundle.write_text(json.dumps({
        "services": [{"name": "a"}, {"name": "b"}],
        "clusterTemplates": {"t": {"name": "t", "defaults": {"services": ["a"]}}},
    }))
    tagged = tmp_path / "more.yaml"
    tagged.write_text("kind: service\nname: c\n---\nkind: hardware\nname: big\nprovidermap: {sim: {flavor: f}}\n")
    loaded = load_sources([bundle, tagged])
    assert loaded.problems == []
    assert set(loaded.catalog.services) == {"a", "b", "c"}
    assert set(loaded.catalog.clustertemplates) == {"t"} and set(loaded.catalog.hardwaretypes) == {"big"}


def test_a_single_file_takes_its_kind_from_its_folder(tmp_path: Path) -> None:
    shutil.copytree(DEMO, tmp_path / "cat")
    loaded = load_sources([tmp_path / "cat" / "services" / "base.json", tmp_path / "cat" / "hardwaretypes"])
    assert loaded.problems == [] and set(loaded.catalog.services) == {"base"} and len(loaded.catalog.hardwaretypes) == 3


def test_unknown_kinds_untyped_entities_and_duplicates_are_problems(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text("kind: gadget\nname: g\n---\nname: what\n")
    (tmp_path / "services").mkdir()
    (tmp_path / "services" / "one.json").write_text(json.dumps({"name": "dup"}))
    (tmp_path / "services" / "two.json").write_text(json.dumps({"name": "dup"}))
    loaded = load_sources([tmp_path / "x.yaml", tmp_path, tmp_path / "missing"])
    messages = [str(p) for p in loaded.problems]
    assert any("unknown kind 'gadget'" in m for m in messages)
    assert any("cannot tell which kind of entity" in m for m in messages)
    assert any("duplicate name" in m and "two.json" in m for m in messages)
    assert any("no such file or folder" in m for m in messages)
