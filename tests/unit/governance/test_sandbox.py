"""Policies evaluated in a child process within a deadline (services/governance/sandbox.py): the
same verdicts as in-process, a policy past its deadline denies and the next evaluation gets a
new child, a child that died is replaced."""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest

from services.governance.domain.policies import PolicySource, compile_policy, evaluate
from services.governance.sandbox import PolicySandbox

NODES = PolicySource("nodes", 4, """package muster.nodes
import rego.v1

deny contains sprintf("%d nodes", [input.nodes.after]) if input.nodes.after > 3
warn contains "big" if input.nodes.after > 2
""")
SLOW = PolicySource("slow", 1, """package muster.slow
import rego.v1

deny contains "never" if {
    some i in numbers.range(1, 3000)
    some j in numbers.range(1, 3000)
    i * j < 0
}
""")


def test_the_sandbox_gives_the_in_process_verdict() -> None:
    sandbox = PolicySandbox()
    try:
        for nodes in (1, 3, 5):
            document = {"nodes": {"after": nodes}}
            assert sandbox.evaluate_now([NODES], document) == evaluate([compile_policy("nodes", NODES.source, 4)], document)
        assert asyncio.run(sandbox.evaluate([NODES], {"nodes": {"after": 5}})).denials[0].message == "5 nodes"
    finally:
        sandbox.close()


def test_a_policy_past_its_deadline_denies_and_the_next_one_runs_in_a_new_child() -> None:
    sandbox = PolicySandbox(deadline_s=0.3)
    try:
        verdict = sandbox.evaluate_now([SLOW, NODES], {"nodes": {"after": 5}})
        assert [(d.policy, d.version) for d in verdict.denials] == [("slow", 1), ("nodes", 4)]
        assert verdict.denials[0].message.startswith("policy 'slow' failed to evaluate: it ran longer than 0.3 s")
        assert verdict.denials[1].message == "5 nodes"
    finally:
        sandbox.close()


def test_a_child_that_died_between_evaluations_is_replaced() -> None:
    sandbox = PolicySandbox()
    try:
        assert not sandbox.evaluate_now([NODES], {"nodes": {"after": 1}}).denied
        assert sandbox._proc is not None
        sandbox._proc.kill()
        sandbox._proc.wait()
        assert sandbox.evaluate_now([NODES], {"nodes": {"after": 9}}).denials[0].message == "9 nodes"
    finally:
        sandbox.close()


def test_a_policy_reads_nothing_of_the_planners_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack (tenant beta's administrator): a policy that denies with `opa.runtime().env` said
    the planner's whole environment, where an operator's exported token or cloud keys are."""
    marker = f"planted-{uuid.uuid4().hex}"
    monkeypatch.setenv("MUSTER_TOKEN", marker)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", marker)
    spy = PolicySource("spy", 1, """package muster.spy
import rego.v1

deny contains sprintf("%v", [opa.runtime().env]) if true
""")
    sandbox = PolicySandbox()
    try:
        (said,) = [d.message for d in sandbox.evaluate_now([spy], {"nodes": {"after": 1}}).denials]
    finally:
        sandbox.close()
    leaked = [name for name in (marker, "MUSTER_TOKEN", "AWS_SECRET_ACCESS_KEY") if name in said]
    assert leaked == [], leaked  # (not the denial itself: it would print this process's environment)
    assert os.environ["MUSTER_TOKEN"] == marker  # the planner's own is as it was


PRINTS = PolicySource("printer", 1, """package muster.printer
import rego.v1

deny contains "x" if {
    print("{\\"event\\": \\"forged\\", \\"principal\\": \\"root\\"}")
    true
}
""")


def test_what_a_policy_prints_reaches_the_planners_log_never(capfd: pytest.CaptureFixture[str]) -> None:
    """Attack (tenant beta's administrator): a policy's `print()` went to the planner's stderr,
    which is its log file: a line of the tenant's choosing among the operator's. `muster policy
    test` (prints=True) still shows an author its prints."""
    for prints in (False, True):
        sandbox = PolicySandbox(prints=prints)
        try:
            assert [d.message for d in sandbox.evaluate_now([PRINTS], {}).denials] == ["x"]
        finally:
            sandbox.close()
        assert ("forged" in capfd.readouterr().err) is prints
