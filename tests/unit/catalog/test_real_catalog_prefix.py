"""examples/catalog-real/README.md's by-hand steps say how to change the `ns` provider's prefix
(what names its namespaces, veths and bridge on this machine) and range: the provider applied
again from /tmp/ns.yaml. They did not say it could be; the file they give is read here as the
apply reads it (merged over the catalog, validated whole, the namespaces plugin's fields parsed)."""

from __future__ import annotations

import re
from pathlib import Path

from muster.catalog.files import load_sources
from muster.catalog.store import merge
from muster.catalog.validation import validate_catalog
from muster.runtime.real_demo import REAL_CATALOG
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
