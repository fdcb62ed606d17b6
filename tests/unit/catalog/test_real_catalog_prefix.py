"""examples/catalog-real/README.md's by-hand steps say how to change the `ns` provider's prefix
(what names its namespaces, veths and bridge on this machine) and range: the provider applied
again from /tmp/ns.yaml. They did not say it could be; the file they give is read here as the
apply reads it (merged over the catalog, validated whole, the namespaces plugin's fields parsed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from muster.catalog.files import load_sources
from muster.catalog.store import merge
from muster.catalog.validation import validate_catalog
from muster.runtime.real_demo import REAL_CATALOG
from services.provisioner.plugins.descriptor import FieldSpec
from services.provisioner.plugins.specs import catalog_plugins

HEREDOC = re.compile(r"^cat > /tmp/ns\.yaml <<'EOF'[^\n]*\n(.*?)^EOF$", re.S | re.M)


def test_the_readmes_ns_yaml_changes_only_the_prefix_and_range_of_provider_ns(tmp_path: Path) -> None:
    found = HEREDOC.search((REAL_CATALOG / "README.md").read_text())
    assert found, "README.md: no `cat > /tmp/ns.yaml <<'EOF'` in the by-hand steps"
    (tmp_path / "ns.yaml").write_text(found.group(1))
    base = load_sources([REAL_CATALOG / "catalog.yaml"]).catalog
    incoming = load_sources([tmp_path / "ns.yaml"]).catalog
    assert set(incoming.providers) == {"ns"} and not incoming.services and not incoming.clustertemplates
    merged = merge(base, incoming)
    assert [p for p in validate_catalog(merged, catalog_plugins()) if p.is_error] == []
    ns, before = merged.providers["ns"], base.providers["ns"]
    assert ns.provisioner["prefix"] != before.provisioner["prefix"] and ns.provisioner["network"] != before.provisioner["network"]
    assert ns.model_dump(exclude={"provisioner"}) == before.model_dump(exclude={"provisioner"})


def test_a_prefix_the_namespaces_provider_cannot_use_is_refused_when_the_catalog_is_applied() -> None:
    """It was accepted, and every create on the provider then failed, permanently: the plugin's
    descriptor gives the form (`pattern`), and the catalog's check refuses the value at its field."""
    catalog = load_sources([REAL_CATALOG / "catalog.yaml"]).catalog
    for prefix in ("Walk", "toolong1", "a-b", ""):  # ("": unset, the default)
        catalog.providers["ns"].provisioner["prefix"] = prefix
        errors = [str(p) for p in validate_catalog(catalog, catalog_plugins()) if p.is_error]
        assert errors == ([f"provider 'ns', field provisioner.prefix: {prefix!r} is not of the form [a-z0-9]{{1,6}} "
                          "(1-6 lower-case letters or digits: the bridge is <prefix>-br, each node <prefix>-<8 hex>; "
                          "a sweep of one prefix leaves others alone)"] if prefix else []), (prefix, errors)


def test_a_range_the_namespaces_provider_cannot_use_is_refused_when_the_catalog_is_applied() -> None:
    """A `network` that is no IPv4 range, or one smaller than the /24 a bridge takes, was accepted,
    and every create on the provider then failed (permanently, `invalid address range ...`)."""
    catalog = load_sources([REAL_CATALOG / "catalog.yaml"]).catalog
    for network, ok in (("10.213.0.0/33", False), ("10.213.0.0/25", False), ("10.213.0.0", False), ("lots", False),
                        ("10.214.0.0/16", True), ("10.9.8.0/24", True), ("10.0.0.0/8", True)):
        catalog.providers["ns"].provisioner["network"] = network
        errors = [str(p) for p in validate_catalog(catalog, catalog_plugins()) if p.is_error]
        assert (errors == []) == ok, (network, errors)
        if not ok:
            assert errors[0].startswith(f"provider 'ns', field provisioner.network: {network!r} is not of the form "), errors
            assert "an IPv4 range of /24 or more, 10.213.0.0/16" in errors[0]


@pytest.mark.parametrize(("field", "said"), [
    ({"label": "n", "type": "number", "pattern": "[0-9]+"}, "'pattern' is only for text fields"),
    ({"label": "p", "pattern": "[a-z"}, "'pattern' is not a regular expression"),
    ({"label": "p", "pattern": "[a-z]+", "default": "A"}, "'A' is not of the form [a-z]+ (p)"),
])
def test_a_descriptor_pattern_is_a_text_fields_regular_expression_its_default_matches(field: dict[str, object], said: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(said)):
        FieldSpec.model_validate(field)


def test_muster_catalog_validate_prints_the_form_as_written(tmp_path: Path) -> None:
    """The problem's text went through rich's markup: `is not of the form {1,6}` ([a-z0-9] taken for a style)."""
    from click.testing import CliRunner

    from muster.cli import main

    text = (REAL_CATALOG / "catalog.yaml").read_text().replace("prefix: mu}", "prefix: Walk_1}")
    (tmp_path / "catalog.yaml").write_text(text)
    said = CliRunner().invoke(main, ["catalog", "validate", str(tmp_path / "catalog.yaml")])
    assert said.exit_code != 0 and "'Walk_1' is not of the form [a-z0-9]{1,6} (1-6 lower-case" in said.output, said.output
