"""`muster policy list` showed an empty description for every policy applied without
`--description`, though each example policy says what it does in its first comment line."""

from __future__ import annotations

from pathlib import Path

from services.governance.cli import first_comment

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "policies"


def test_a_policy_without_a_description_is_described_by_its_first_comment_line() -> None:
    said = first_comment((EXAMPLES / "nodes_per_tenant.rego").read_text())
    assert said == "At most 40 nodes in the whole tenant, and at most 20 in one cluster; a warning past 30."
    assert first_comment("\n\n# one\n# two\npackage x") == "one"
    assert first_comment("package x\n# later") == ""
