"""Size budgets at admission (contracts/limits.py): the reason names the field and the limit."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from contracts.catalog import Catalog, Service
from contracts.commands import ApproveJob, ConfigureCluster, CreateCluster, ExpandCluster, RejectJob
from contracts.errors import describe_validation_error
from contracts.limits import MAX_CONFIG_BYTES, MAX_ENTITY_BYTES, NotJson, check_size, json_size, strict_json
from muster.catalog.files import load_catalog
from muster.catalog.store import CatalogState, check_apply

DEMO = Path(__file__).parents[3] / "muster" / "demo" / "catalog"


def test_a_config_over_the_budget_is_refused_naming_the_field_and_the_limit() -> None:
    fat = {"blob": "x" * MAX_CONFIG_BYTES}
    for make in (lambda: CreateCluster(name="c", template="t", nodes=2, config=fat),
                 lambda: ConfigureCluster(cluster_id="c", config=fat)):
        with pytest.raises(ValidationError) as err:
            make()
        reason = describe_validation_error(err.value)
        assert reason.startswith("config: ") and f"the limit is {MAX_CONFIG_BYTES:,} bytes" in reason
    fits = {"blob": "x" * (MAX_CONFIG_BYTES - 20)}
    assert json_size(fits) <= MAX_CONFIG_BYTES and CreateCluster(name="c", template="t", nodes=2, config=fits).config == fits


def test_a_bound_passed_is_said_with_the_field_the_limit_and_what_was_given() -> None:
    """The CLI's words (`muster job approve -m ...`, `muster cluster expand --nodes ...`), not pydantic's."""
    for make, said in ((lambda: ApproveJob(job_id="j", comment="x" * 2001), "comment: 2,001 characters given; at most 2,000"),
                       (lambda: RejectJob(job_id="j", comment="é" * 3000), "comment: 3,000 characters given; at most 2,000"),
                       (lambda: ExpandCluster(cluster_id="c", nodes=10_001),
                        "nodes: a cluster has at most 10,000 nodes (muster's limit, whatever the template says); 10,001 requested")):
        with pytest.raises(ValidationError) as err:
            make()
        assert describe_validation_error(err.value) == said
    assert ApproveJob(job_id="j", comment="x" * 2000).comment == "x" * 2000


def test_check_size_counts_compact_json() -> None:
    assert json_size({"a": [1, 2]}) == len('{"a":[1,2]}')
    assert check_size("x", "ab", 4) is None
    assert check_size("x", "abcd", 4) == "x is 6 bytes; the limit is 4 bytes"


def test_a_catalog_entity_over_the_budget_is_refused_naming_its_largest_field() -> None:
    demo = load_catalog(DEMO)
    state = CatalogState(catalog=demo, last_seq=1, versions={})
    script = "echo hi\n" * (MAX_ENTITY_BYTES // 8)
    big = Service.model_validate({"name": "big", "provisioner": {"actions": {"install": {"type": "shell", "fields": {"script": script}}}}})
    check = check_apply(state, Catalog(services={"big": big}), None)
    [problem] = [p for p in check.errors if p.name == "big"]
    assert problem.field == "provisioner" and f"the limit is {MAX_ENTITY_BYTES:,} bytes" in problem.message
    assert "service 'big'" in str(problem)


@pytest.mark.parametrize(("text", "said", "deep"), [
    ('{"a": NaN}', "NaN is not a JSON number (JSON has no NaN or Infinity)", False),
    ('[Infinity]', "Infinity is not a JSON number", False),
    ('{"a": -1e400}', "-1e400 is too large a number (a JSON number here is finite)", False),
    ("9" * 4301, "a number of 4,301 digits; at most 4,300", False),
    ("[" * 33 + "]" * 33, "nests 33 levels deep; the limit is 32", True),
    ("[" * 200_000, "nests 200,000 levels deep; the limit is 32", True),
])
def test_strict_json_refuses_what_pythons_parser_takes_or_gives_up_on_by_its_own_error(text: str, said: str, deep: bool) -> None:
    """json.loads takes the first three (pydantic then writes them to the log as null), raises a
    bare ValueError on the fourth and RecursionError on the last: every entry from outside (a
    request on the bus, an HTTP body, a console form) parses with strict_json instead."""
    import json

    with pytest.raises(NotJson) as err:
        strict_json(text)
    assert str(err.value).startswith(said) and err.value.deep is deep
    assert err.value.said().startswith(said if deep else f"is not valid JSON: {said}")
    with pytest.raises(json.JSONDecodeError):
        strict_json('{"a": }')
    with pytest.raises(NotJson, match=r"^NaN is not a JSON number \(JSON has no NaN or Infinity\), at config\.a\.1$"):
        strict_json('{"nodes": 2, "config": {"a": [1, NaN]}}')  # the field named, as a validation error would
    assert strict_json('{"a": [1, 2.5, -3e10, "NaN", null], "b": {"c": ' + "9" * 4300 + "}}")["a"] == [1, 2.5, -3e10, "NaN", None]
