"""Two mistakes a policy compiled with and never said (services/governance/domain/bindings.py),
refused at `policy apply` and by `muster policy test`, naming the line (session 33's audit):
a name nothing binds (the rule never holds: the policy allowed what it was written to refuse)
and Rego v0's `deny[msg] { ... }` (an object: every request it held for was denied as "failed to
evaluate", a warn's too)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from contracts.governance import GovernanceAnswer
from muster.cli import main
from services.governance import cli
from services.governance.domain.bindings import object_rules, unbound
from services.governance.domain.entities import plan_puts
from services.governance.domain.policies import compile_policy, evaluate_one

LIMIT = 'package lim\nimport rego.v1\n\ndeny contains "too big" if {\n  input.request.nodes > limit\n}\n'
V0 = 'package old\n\ndeny[msg] {\n  input.request.nodes > 3\n  msg := "too many"\n}\n'
EXAMPLES = sorted((Path(__file__).parents[3] / "examples" / "policies").glob("*.rego"))


def put(name: str, source: str) -> list[str]:
    return plan_puts({}, "policy", [{"name": name, "source": source}])[1]


def test_a_name_nothing_binds_is_refused_naming_its_line() -> None:
    assert evaluate_one(compile_policy("lim", LIMIT), {"request": {"nodes": 50}}).denials == ()  # what it did: allowed
    (problem,) = put("lim", LIMIT)
    assert problem.startswith("policy 'lim' (line 5) reads `limit`, which no rule, import, `:=`, `some` or reference of "
                              "it binds: a rule reading it never holds"), problem
    message = 'package m\nimport rego.v1\ndeny contains msg if {\n  input.request.nodes > 3\n  msg := sprintf("%v", [y])\n}\n'
    assert unbound(message) == [(5, "y")]


def test_rego_v0_partial_rules_are_refused_saying_what_to_write() -> None:
    verdict = evaluate_one(compile_policy("old", V0), {"request": {"nodes": 5}})
    assert "failed to evaluate" in verdict.denials[0].message  # what it did: every such request denied
    (problem,) = put("old", V0)
    assert problem == ("policy 'old' (line 3): `deny[msg]` makes deny an object, not messages (Rego v0's partial set is an "
                       "object in Rego v1): write `deny contains msg if { ... }`")
    assert object_rules('package w\nimport rego.v1\nwarn[m] if { m := "x" }\n')[0][0] == 3


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_examples_and_what_rego_binds_are_taken(path: Path) -> None:
    assert put(path.stem, path.read_text()) == []


def test_every_way_rego_binds_a_name_is_taken() -> None:
    source = '''package v
import rego.v1
limits := {"small": 3}
max_nodes(t) := n if { n := limits[t] } else := 10
deny contains msg if {
  some g in input.layout
  g.count > max_nodes(g.hardwaretype)
  names := [s | some s in g.services; startswith(s, "hdfs")]
  every k, v in input.cluster.labels { k != v }
  [a, b] := [1, 2]
  {"x": c} := {"x": 3}
  input.layout[i].count > a + b + c + i
  d = 4
  5 = e
  walk(input, [path, value])
  count(path) > d + e
  hour := time.clock([input.now_ns, "UTC"])[0]
  msg := sprintf("%v %v %v", [names, hour, value]) # limit, in a comment
}
'''
    assert unbound(source) == [] and object_rules(source) == []


def test_policy_test_refuses_them_too(tmp_path: Path) -> None:
    (tmp_path / "lim.rego").write_text(LIMIT)
    (tmp_path / "in.json").write_text('{"request": {"nodes": 50}}')
    ran = CliRunner().invoke(main, ["policy", "test", str(tmp_path / "lim.rego"), "--input", str(tmp_path / "in.json")])
    assert ran.exit_code == 2 and "policy 'lim' (line 5) reads `limit`" in ran.output, ran.output


@pytest.mark.parametrize(("call", "named"), [("nosuchfn(input.layout) > 3", "nosuchfn"),
                                             ('http.send({"method": "get", "url": "http://x"})', "http.send"),
                                             ("any([true])", "any")])
def test_a_call_of_no_function_is_refused_naming_its_line(call: str, named: str) -> None:
    source = f'package c\nimport rego.v1\n\ndeny contains "held" if {{\n  {call}\n}}\n'
    verdict = evaluate_one(compile_policy("c", source), {"layout": [1, 2, 3, 4]})
    assert "failed to evaluate" in verdict.denials[0].message  # what it did: every request reaching it denied
    (problem,) = put("c", source)
    assert problem.startswith(f"policy 'c' (line 5) calls `{named}`, which is neither a function of the policy nor a built-in"), problem


def test_the_policys_own_functions_and_print_are_calls_it_may_make() -> None:
    source = ('package f\nimport rego.v1\n\ndouble(x) := 2 * x\n\ndeny contains "big" if {\n  print("nodes", input.request.nodes)\n'
              '  double(input.request.nodes) > 10\n  time.clock([input.now_ns, "UTC"])[0] > 3\n}\n')
    assert put("f", source) == []


def test_policy_list_warns_of_a_policy_applied_before_it_was_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """One applied before session 33 is in force: since session 34 it denies everything (`stored`), and says so."""
    items = [{"name": "lim", "version": 1, "by": "ada", "updated_at": "2026-12-01T00:00:00+00:00", "entity": {"source": LIMIT}},
             {"name": "ok", "version": 2, "by": "ada", "updated_at": "2026-12-01T00:00:00+00:00",
              "entity": {"source": EXAMPLES[0].read_text()}}]

    async def answered(*_: Any, **__: Any) -> tuple[str, GovernanceAnswer]:
        return "acme", GovernanceAnswer(ok=True, items=items)

    monkeypatch.setattr(cli, "ask_in", answered)
    ran = CliRunner(env={"NATS_URL": "nats://127.0.0.1:1", "COLUMNS": "200"}).invoke(main, ["policy", "list"])
    assert ran.exit_code == 0, ran.output
    warned = [line for line in ran.output.splitlines() if line.startswith("warning: ")]
    assert warned == ["warning: policy 'lim' (version 1) fails a check `muster policy apply` makes now: (line 5) reads "
                      "`limit`, which no rule, import, `:=`, `some` or reference of it binds: a rule reading it never holds, so "
                      "the policy would allow what it refuses (OPA: var limit is unsafe); every operation it judges is denied "
                      "(fail closed) until it is applied again corrected or deleted (`muster policy delete lim`)"], ran.output
    as_json = CliRunner(env={"NATS_URL": "nats://127.0.0.1:1"}).invoke(main, ["policy", "list", "--json"])
    (answer,) = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert answer["warnings"] == [warned[0].removeprefix("warning: ")], as_json.output  # a script reads it too
