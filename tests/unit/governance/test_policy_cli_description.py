"""`muster policy list` showed an empty description for every policy applied without
`--description`, though each example policy says what it does in its first comment line."""

from __future__ import annotations

from pathlib import Path

from services.governance.cli import first_comment

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "policies"


def test_a_policy_without_a_description_is_described_by_its_first_comment_line() -> None:
    said = first_comment((EXAMPLES / "nodes_per_tenant.rego").read_text())
    assert said == "At most 40 nodes in the whole tenant, and at most 20 in one cluster; a warning past 30."
    assert first_comment("\n\n# One.\n# Two.\npackage x") == "One."
    # A sentence over two lines is said whole, and only the first sentence (walk of session 26:
    # freeze_window's was cut at "looking (check) and").
    assert first_comment((EXAMPLES / "freeze_window.rego").read_text()) == (
        "No change on Fridays from 16:00 UTC, nor on the listed freeze days; looking (check) and "
        "extending a lease are always allowed.")
    assert first_comment("# one\n#\n# two\npackage x") == "one two"
    assert first_comment("package x\n# later") == ""
