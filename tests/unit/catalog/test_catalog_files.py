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


def test_a_key_no_field_reads_is_a_warning_naming_file_entity_and_field(tmp_path: Path) -> None:
    """Unknown keys are ignored (a Coopr export may carry fields muster does not use), but a
    typo must not vanish without a word: the service would be applied without its requirement."""
    (tmp_path / "services").mkdir()
    body = {"name": "web", "bogus": 1,
            "dependencies": {"runtime": {"requirez": ["db"]}},
            "provisioner": {"actions": {"start": {"type": "shell", "feilds": {"script": "x"}}}}}
    (tmp_path / "services" / "web.json").write_text(json.dumps(body))
    (tmp_path / "t.yaml").write_text("kind: template\nname: t\nconstraints:\n  services:\n    web:\n"
                                      "      quantities: {min: 1, stepSize: 1, maxx: 3}\n  layout: {mustcoexist: [[web]]}\n"
                                      "links: [{url: 'http://x', lable: docs}]\n")
    loaded = load_sources([tmp_path / "services", tmp_path / "t.yaml"])
    assert all(not p.is_error for p in loaded.problems) and set(loaded.catalog.services) == {"web"}
    found = {(p.kind, p.name, p.field): p for p in loaded.problems}
    assert set(found) == {
        ("services", "web", "bogus"),
        ("services", "web", "dependencies.runtime.requirez"),
        ("services", "web", "provisioner.actions.start.feilds"),
        ("clustertemplates", "t", "constraints.services.web.quantities.maxx"),  # stepSize: Coopr's own, removed by it
        ("clustertemplates", "t", "links[0].lable"),
    }
    typo = found[("services", "web", "dependencies.runtime.requirez")]
    assert typo.severity == "warning" and typo.message == "unknown field 'requirez', ignored: did you mean 'requires'?"
    assert str(typo).startswith(f"{tmp_path / 'services' / 'web.json'}: service 'web', field dependencies.runtime.requirez:")


def test_the_demo_the_real_and_coopr_catalogs_have_no_unknown_field() -> None:
    root = Path(__file__).parents[3]
    for source in (DEMO, root / "examples" / "catalog-real" / "catalog.yaml", root / "tests" / "fixtures" / "catalogs" / "reactor-medium"):
        loaded = load_sources([source])
        assert loaded.count > 10 and [str(p) for p in loaded.problems] == []


def test_a_yaml_error_is_one_line_with_its_line_and_column(tmp_path: Path) -> None:
    (tmp_path / "services").mkdir()
    (tmp_path / "services" / "x.yaml").write_text("name: x\ndescription: [unclosed\n")
    (problem,) = load_sources([tmp_path]).problems
    assert str(problem) == (f"{tmp_path / 'services' / 'x.yaml'}: not valid YAML: expected ',' or ']', but got '<stream end>' "
                            "(line 3 column 1), while parsing a flow sequence started at line 2 column 14")
