"""Policies compiled and evaluated in-process (regopy): deny refuses with the policy's message,
warn is kept, a policy that does not compile is refused with its line, one that fails while
evaluating denies (fail closed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.governance.domain.policies import PolicyCompileError, compile_policy, evaluate
from services.governance.domain.stored import compile_all

NODES = """package muster.nodes
import rego.v1

deny contains msg if {
    input.request.nodes > 10
    msg := sprintf("at most 10 nodes per cluster; %d asked", [input.request.nodes])
}

warn contains "more than 3 nodes: consider a smaller test cluster" if input.request.nodes > 3
"""


def test_deny_refuses_with_the_policys_message_and_warn_is_kept() -> None:
    policy = compile_policy("nodes", NODES, version=2)
    big = evaluate([policy], {"request": {"nodes": 50}})
    assert big.denied and [d.message for d in big.denials] == ["at most 10 nodes per cluster; 50 asked"]
    assert big.denials[0].policy == "nodes" and big.denials[0].version == 2
    small = evaluate([policy], {"request": {"nodes": 5}})
    assert not small.denied and [w.message for w in small.warnings] == ["more than 3 nodes: consider a smaller test cluster"]
    assert evaluate([policy], {"request": {"nodes": 1}}) == evaluate([], {})


@pytest.mark.parametrize(("source", "line", "words"), [
    ("package muster.x\nimport rego.v1\n\ndeny contains msg if {\n    input.request.nodes >\n    msg := \"x\"\n}\n", 5, "unify"),
    ("package muster.x\nimport rego.v1\ndeny contains msg if {\n  input.x\n", 3, "unclosed"),
    ("deny := true\n", 0, "package"),
    ("package muster.x\nallow := true\n", 0, "neither"),
])
def test_a_policy_that_does_not_compile_is_refused_with_the_line_and_the_reason(source: str, line: int, words: str) -> None:
    with pytest.raises(PolicyCompileError) as raised:
        compile_policy("x", source)
    assert raised.value.line == line and words in str(raised.value)


@pytest.mark.parametrize(("source", "words"), [
    ("package muster.c\nimport rego.v1\ndeny := 1 if input.a\ndeny := 2 if input.a\n", "multiple outputs"),
    ("package muster.d\nimport rego.v1\ndeny contains msg if {\n x := 1 / input.zero\n msg := sprintf(\"%v\", [x])\n}\n", "divide by zero"),
])
def test_a_policy_that_fails_while_evaluating_denies_and_says_why(source: str, words: str) -> None:
    verdict = evaluate([compile_policy("p", source)], {"a": True, "zero": 0})
    assert verdict.denied and words in verdict.denials[0].message and "fail closed" in verdict.denials[0].message


def test_deny_as_true_or_as_objects_still_reads_as_messages() -> None:
    boolean = compile_policy("b", "package muster.b\nimport rego.v1\ndefault deny := false\ndeny if input.x\n")
    objects = compile_policy("o", 'package muster.o\nimport rego.v1\ndeny contains {"msg": "no"} if input.x\n')
    verdict = evaluate([boolean, objects], {"x": True})
    assert [d.message for d in verdict.denials] == [
        "a deny rule holds that gives no message (a tenant admin reads the policy with muster policy list --source)", "no"]
    assert not evaluate([boolean, objects], {"x": False}).denied


def test_a_stored_policy_that_no_longer_compiles_denies_everything() -> None:
    verdict = evaluate(compile_all([("old", "garbage", 3)]), {})
    assert verdict.denied and "does not compile" in verdict.denials[0].message and verdict.denials[0].version == 3


def test_time_built_ins_work_in_a_process_that_loaded_aiohttp_first() -> None:
    """rego-cpp loaded after a C++ extension (aiohttp's frozenlist) aborted the process in its
    time built-ins; `import muster` makes it load first (muster/_startup.py)."""
    import subprocess
    import sys

    code = """
import muster, aiohttp
from pathlib import Path
from services.governance.domain.policies import compile_policy, evaluate
p = compile_policy("freeze", Path("examples/policies/freeze_window.rego").read_text())
for now in (1795712400, 1795885200) * 5:  # a Wednesday, a Friday evening
    evaluate([p], {"operation": "create", "now_ns": now * 10**9})
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).parents[3])
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_muster_policy_test_evaluates_a_file_on_an_input_and_exits_1_when_denied(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from muster.cli import main

    policy = tmp_path / "nodes.rego"
    policy.write_text(NODES)
    big, small = tmp_path / "big.json", tmp_path / "small.yaml"
    big.write_text('{"request": {"nodes": 50}}')
    small.write_text("request:\n  nodes: 5\n")
    denied = CliRunner().invoke(main, ["policy", "test", str(policy), "--input", str(big)])
    assert denied.exit_code == 1 and "deny: at most 10 nodes per cluster; 50 asked" in denied.output
    allowed = CliRunner().invoke(main, ["policy", "test", str(policy), "--input", str(small), "--json"])
    assert allowed.exit_code == 0 and '"allowed": true' in allowed.output
    dry_run = tmp_path / "plan.json"  # a dry run's answer (`--dry-run --json`) carries the input it was judged on
    dry_run.write_text('{"type": "DryRun", "plan": {}, "policy": {"deny": [], "input": {"request": {"nodes": 50}}}}')
    judged = CliRunner().invoke(main, ["policy", "test", str(policy), "--input", str(dry_run)])
    assert judged.exit_code == 1 and "50 asked" in judged.output
    broken = tmp_path / "broken.rego"
    broken.write_text("package x\nimport rego.v1\ndeny contains m if {\n  input.x\n")
    refused = CliRunner().invoke(main, ["policy", "test", str(broken), "--input", str(small)])
    assert refused.exit_code == 2 and "line 3" in refused.output


def test_a_refusal_reads_as_one_sentence_and_its_exit_code_says_why() -> None:
    from contracts.governance import GovernanceAnswer
    from muster.cli_support import EXIT_DENIED, EXIT_FAILED, EXIT_INVALID
    from services.governance.cli import refusal

    denied = refusal("put", GovernanceAnswer(ok=False, reason="not written: uma has no grant permission", code="forbidden"), False)
    assert (denied.exit_code, denied.message, denied.document) == (EXIT_DENIED, "put refused: not written: uma has no grant permission",
                                                                   None)
    bad = refusal("put", GovernanceAnswer(ok=False, reason="nothing written: 1 problem", problems=["p (line 5): x"], code="invalid"), True)
    assert bad.exit_code == EXIT_INVALID and bad.message.endswith("\n  p (line 5): x") and bad.document["problems"] == ["p (line 5): x"]
    undelivered = refusal("notify-test", GovernanceAnswer(ok=False, reason="HTTP 503", code="unavailable"), False)
    assert undelivered.exit_code == EXIT_FAILED and undelivered.message == "notify-test failed: HTTP 503"


@pytest.mark.parametrize(("rule", "words"), [
    ("deny := 5", "its `deny` is 5, not messages"),
    ('deny := {"reason": "too big"}', 'its `deny` is an object ({"reason": "too big"}), not messages'),
    ('deny := ""', 'its `deny` holds "", which is not a message'),
    ('deny := ["fine", 7]', "its `deny` holds 7, which is not a message"),
    ('warn := {"msg": null}', "its `warn` is an object"),
])
def test_a_deny_or_warn_that_is_not_messages_denies_saying_what_it_is(rule: str, words: str) -> None:
    """Read as messages, these denied with `5`, `null` or an empty message (and a wrong `warn`
    warned `5`): nobody could tell what was refused, or that the policy is wrong."""
    verdict = evaluate([compile_policy("p", f"package muster.p\n{rule}\n")], {})
    (denial,) = verdict.denials
    assert denial.message.startswith(f"policy 'p' failed to evaluate: {words}"), denial
    assert denial.message.endswith("; denied (fail closed)") and not verdict.warnings


def test_empty_or_false_outputs_refuse_nothing() -> None:
    for rule in ("deny := false", "deny := []", "deny := {}", "deny := set()"):
        assert evaluate([compile_policy("p", f"package muster.p\n{rule}\n")], {}) == evaluate([], {}), rule


def test_a_recursive_policy_denies_naming_the_recursion() -> None:
    """rego-cpp answers a recursion with an "ok" output whose text is the error: it was read as
    JSON and blamed on "a string with quotes in it, from sprintf?"."""
    source = "package muster.r\nimport rego.v1\n\nf(x) := f(x)\n\ndeny contains \"x\" if f(1)\n"
    verdict = evaluate([compile_policy("r", source)], {})
    assert verdict.denied and "Recursion detected in rule body" in verdict.denials[0].message, verdict
    assert "sprintf" not in verdict.denials[0].message


def test_muster_policy_test_refuses_an_input_that_is_not_an_object(tmp_path: Path) -> None:
    """A list or an empty file was evaluated as an empty input, and most policies allow that."""
    from click.testing import CliRunner

    from muster.cli import main

    policy = tmp_path / "nodes.rego"
    policy.write_text(NODES)
    for name, text, what in (("list.json", "[1, 2]", "a list"), ("empty.yaml", "", "an empty file"), ("n.json", "5", "a int")):
        given = tmp_path / name
        given.write_text(text)
        result = CliRunner().invoke(main, ["policy", "test", str(policy), "--input", str(given)])
        assert result.exit_code == 2 and f"the input is {what}; it must be a JSON or YAML object" in result.output, result.output


def test_muster_policy_test_refuses_a_policy_that_reads_what_its_input_never_has(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from muster.cli import main

    policy = tmp_path / "typo.rego"
    policy.write_text('package muster.typo\nimport rego.v1\n\ndeny contains "too many" if input.request.node_count > 3\n')
    given = tmp_path / "in.json"
    given.write_text('{"request": {"nodes": 50}}')
    result = CliRunner().invoke(main, ["policy", "test", str(policy), "--input", str(given)])
    assert result.exit_code == 2 and "input.request.node_count: input.request has no field 'node_count'" in result.output


def test_muster_policy_test_and_apply_refuse_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    """It was an internal error (UnicodeDecodeError), exit 1."""
    from click.testing import CliRunner

    from muster.cli import main

    binary = tmp_path / "bin.rego"
    binary.write_bytes(b"package muster.bin\n\xff\xfe deny := true\n")
    given, policy = tmp_path / "in.json", tmp_path / "nodes.rego"
    given.write_text("{}")
    policy.write_text(NODES)
    for args in (["policy", "test", str(binary), "--input", str(given)], ["policy", "test", str(policy), "--input", str(binary)],
                 ["policy", "apply", str(binary)]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2 and f"{binary}: not UTF-8 text (byte 19)" in result.output, (args, result.output)


def test_muster_policy_test_says_what_the_policy_reads_that_a_hand_written_input_lacks(tmp_path: Path) -> None:
    """An input of another shape (`{"nodes": 5}` where the document has `nodes.before|after`,
    no `tenant`) evaluated to `allowed` without a word: every rule on a missing field never
    held, and the author believed the policy let the request through (walk of session 26)."""
    from click.testing import CliRunner

    from muster.cli import main

    policy = Path(__file__).parents[3] / "examples" / "policies" / "nodes_per_tenant.rego"
    given = tmp_path / "in.json"
    given.write_text('{"nodes": 5, "request": {"nodes": 50}}')
    result = CliRunner().invoke(main, ["policy", "test", str(policy), "--input", str(given), "--json"])
    assert result.exit_code == 0, result.output
    assert "note: input.tenant: this input has no field 'tenant': a rule reading it never holds on this input" in result.output
    assert "note: input.nodes.before: this input's input.nodes is 5, with no fields" in result.output
    assert '"absent": ["input.tenant: this input has no field' in result.output


def test_an_input_with_what_the_policy_reads_or_a_null_cluster_gets_no_note() -> None:
    from services.governance.domain.references import absent_inputs

    source = ("package p\nimport rego.v1\ndeny contains \"x\" if input.cluster.labels.env == \"prod\"\n"
              "deny contains \"y\" if input.nodes.after > 3\n")
    assert absent_inputs(source, {"cluster": None, "nodes": {"before": 0, "after": 5}}) == []
    assert absent_inputs(source, {"cluster": {"labels": {}}, "nodes": {"before": 0, "after": 5}}) == []
    assert absent_inputs(source, {"cluster": {}, "nodes": {"after": 5}}) == [
        "input.cluster.labels: this input's input.cluster has no field 'labels'"]
