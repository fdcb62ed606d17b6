"""Whom a policy's message is shown (services/governance/domain/disclosure.py): as written to a
reader that may read what its policy read of the input, else named and not said."""

from __future__ import annotations

from services.governance.domain import disclosure
from services.governance.domain.policies import Finding

BUDGET = 'package b\ndeny contains msg if { msg := sprintf("%v", [input.tenant.per_hour]) }'
CEILING = 'package c\ndeny contains msg if { input.cost.per_hour > 1; msg := "too dear" }'
NAMES = 'package n\n# input.tenant.per_hour in a comment reads nothing\nwarn contains "short" if { count(input.tenant.name) < 3 }'
WHOLE = 'package w\nwarn contains msg if { x := input; msg := sprintf("%v", [x]) }'


def test_a_policy_reads_the_scopes_of_what_it_reads_of_its_input() -> None:
    assert disclosure.reads(BUDGET, ["small"]) == ("cluster:*",)
    assert disclosure.reads(CEILING, ["small", "large", "small"]) == ("catalog:hardwaretypes/large", "catalog:hardwaretypes/small")
    assert disclosure.reads(NAMES, ["small"]) == ()  # the tenant's name is not a total
    assert disclosure.reads(WHOLE, ["small"]) == ("cluster:*", "catalog:hardwaretypes/small")


def test_a_reader_that_may_not_read_them_is_told_the_policy_and_rule_not_the_words() -> None:
    findings = [Finding("budget", 2, "tenant spends 0.40"), Finding("names", 1, "short")]
    reads = {"budget": ("cluster:*",), "names": ()}
    wanda = disclosure.reader(lambda entity: True, totals=False)
    shown = disclosure.shown("deny", findings, reads, wanda, "wanda")
    assert shown[1] == findings[1]  # nothing withheld read: as written
    assert shown[0].policy == "budget" and shown[0].version == 2 and "0.40" not in shown[0].message
    assert shown[0].message.startswith("a deny rule holds whose message is not shown to wanda: the policy reads the tenant's "
                                       "totals, which wanda may not read (`read` on cluster:*)")
    alice = disclosure.reader(None, totals=True)
    assert disclosure.shown("deny", findings, reads, alice, "alice") == findings
    assert disclosure.shown("deny", findings, reads, None, "anyone") == findings  # no identities


def test_a_price_is_withheld_from_one_that_may_not_read_its_hardware_type() -> None:
    tina = disclosure.reader(lambda entity: entity != "hardwaretypes/large", totals=True)
    reads = {"ceiling": ("catalog:hardwaretypes/large", "catalog:hardwaretypes/small")}
    [shown] = disclosure.shown("warn", [Finding("ceiling", 1, "0.60/h")], reads, tina, "tina")
    assert "the price of large, which tina may not read (`read` on catalog:hardwaretypes/large)" in shown.message
    assert "small" not in shown.message and "0.60" not in shown.message
