"""Size budgets at admission (contracts/limits.py): the reason names the field and the limit."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from contracts.catalog import Catalog, Service
from contracts.commands import ApproveJob, ConfigureCluster, CreateCluster, ExpandCluster, RejectJob
from contracts.errors import describe_validation_error
from contracts.limits import MAX_CONFIG_BYTES, MAX_ENTITY_BYTES, check_size, json_size
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
