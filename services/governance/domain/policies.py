"""Policies as code: Rego modules compiled and evaluated in-process (regopy, the rego-cpp
interpreter; no OPA server to run).

`compile_policy` refuses a module that does not compile, naming the line and the reason;
`evaluate` is a pure function of the compiled policies and one input document: each policy's
`deny` (a set or list of messages, a message, or `true`) refuses, its `warn` is shown and
recorded. A policy whose evaluation fails (a conflict between rules, a built-in's error such as
a division by zero) denies, saying why: fail closed.

rego-cpp's errors are read into a line and a sentence by `rego_errors`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from regopy import Interpreter, LogLevel, RegoError  # type: ignore[import-untyped]
from regopy.rego_shared import (  # type: ignore[import-untyped]
    rego_bundle_node,
    rego_bundle_query,
    rego_free_output,
    rego_node_get,
    rego_node_json,
    rego_node_size,
    rego_output_node,
    rego_output_ok,
    rego_output_string,
)

from .rego_errors import Problem, errors, explained, refused_statement
from .rego_errors import first as first_problem
from .rego_text import other_arities

_PACKAGE = re.compile(r"^\s*package\s+([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\s*$", re.MULTILINE)
MAX_MESSAGES = 20
"""Messages kept from one policy's `deny` or `warn` (a rule over every node could make thousands)."""
MAX_MESSAGE_CHARS = 500


class PolicyCompileError(ValueError):
    """The module does not compile: `line` (1-based, 0 when unknown) and `reason`."""

    def __init__(self, name: str, line: int, reason: str) -> None:
        self.name, self.line, self.reason = name, line, reason
        where = f" (line {line})" if line else ""
        super().__init__(f"policy {name!r} does not compile{where}: {reason}")


def _node_text(node: Any) -> str:
    """An error node's S-expression: its children's, or its own when it has none (an empty
    `rego-errorseq(0x7f...)` says nothing: '')."""
    texts = [rego_node_json(rego_node_get(node, i)) for i in range(rego_node_size(node))]
    own = str(rego_node_json(node))
    return "\n".join(texts) if texts else ("" if re.fullmatch(r"[\w-]+\(0x[0-9a-f]+\)", own) else own)


@dataclass(frozen=True)
class PolicySource:
    """A policy as the log has it; compiled where it is evaluated (`sandbox.py`)."""

    name: str
    version: int
    source: str


@dataclass
class CompiledPolicy:
    """A policy ready to evaluate (its interpreter and compiled bundle are kept: building them
    costs about a millisecond, evaluating small inputs a tenth of that)."""

    name: str
    version: int
    package: str
    source: str
    _interpreter: Any = field(repr=False, default=None)
    _bundle: Any = field(repr=False, default=None)

    def __del__(self) -> None:
        # The bundle before its interpreter: freed the other way round (attributes go in the
        # order they were set), rego-cpp's heap was corrupted and a later query aborted.
        self._bundle = None
        self._interpreter = None


def _interpreter() -> Any:
    rego = Interpreter()
    rego.log_level = LogLevel.NONE  # rego-cpp prints errors on stdout otherwise
    rego.strict_built_in_errors = True  # a built-in's error is an error, not "undefined": fail closed
    return rego


def is_builtin(name: str) -> bool:
    """Whether rego-cpp has this built-in (`count`, `time.clock`; not `http.send`)."""
    return bool(_interpreter().is_builtin(name))


def compile_policy(name: str, source: str, version: int = 0) -> CompiledPolicy:
    """The policy compiled, or PolicyCompileError with the first problem's line and reason."""
    found = _PACKAGE.search(source)
    if found is None:
        raise PolicyCompileError(name, 0, "no `package` line: a policy is a Rego module (`package muster.<name>`)")
    package = found.group(1)
    if not re.search(r"^\s*(?:default\s+)?(deny|warn)\b", source, re.MULTILINE):
        raise PolicyCompileError(name, 0, "it defines neither `deny` nor `warn`: a policy says what it refuses or warns of")
    for line, function, n, before, at in other_arities(source)[:1]:
        # rego-cpp refuses it ("Unable to unify due to cycle"), and building it a second time
        # in a process aborted the process: not given to rego-cpp at all.
        raise PolicyCompileError(name, line, explained(Problem(line, (
            f"`{function}` is defined here with {n} argument{'s' * (n != 1)} and with {before} at line {at}: a function "
            "takes one number of arguments")), source))
    rego = _interpreter()
    try:
        rego.add_module(f"{name}.rego", source)
    except RegoError as err:
        first = first_problem(errors(str(err), source))
        raise PolicyCompileError(name, first.line, explained(first, source)) from None
    bundle = rego.build(f"x := data.{package}", [])
    if not bundle.ok():
        first = first_problem(errors(_node_text(rego_bundle_node(bundle._impl)), source))
        del bundle  # freed before its interpreter, as `CompiledPolicy.__del__` frees them
        if not first.line:
            first = refused_statement(source, lambda prefix: _builds(name, prefix, package)) or first
        raise PolicyCompileError(name, first.line, explained(first, source))
    return CompiledPolicy(name, version, package, source, rego, bundle)


def _builds(name: str, source: str, package: str) -> bool:
    rego = _interpreter()
    try:
        rego.add_module(f"{name}.rego", source)
    except RegoError:
        return False
    bundle = rego.build(f"x := data.{package}", [])
    built = bool(bundle.ok())
    del bundle  # before its interpreter (above)
    return built


@dataclass(frozen=True)
class Finding:
    policy: str
    version: int
    message: str


@dataclass(frozen=True)
class Verdict:
    denials: tuple[Finding, ...] = ()
    warnings: tuple[Finding, ...] = ()

    @property
    def denied(self) -> bool:
        return bool(self.denials)


class Unreadable(ValueError):
    """A rule's value that does not read as messages."""


def _shown(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


def _messages(value: Any, rule: str) -> list[str]:
    """A rule's value as messages: a set/list of strings (or of objects with a string `msg`), a
    string, or true; nothing for undefined, false or empty. Anything else (a number, an object
    without `msg`, an empty message) raises Unreadable: read as a message it was shown as `5` or
    `null`, a denial nobody could act on."""
    if value is None or value is False or value == [] or value == {}:
        return []
    if value is True:  # (it said "denied (the policy gives no message)": `expand rejected: expand denied ... denied`)
        return [f"a {rule} rule holds that gives no message (a tenant admin reads the policy with muster policy list --source)"]
    if isinstance(value, dict) and not isinstance(value.get("msg", value.get("message")), str):
        raise Unreadable(f"its `{rule}` is an object ({_shown(value)}), not messages: a set of strings, or of objects "
                         "with a string `msg`")
    if not isinstance(value, (str, list, dict)):
        raise Unreadable(f"its `{rule}` is {_shown(value)}, not messages: a set of strings (or of objects with `msg`), "
                         "a string, or true")
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items[:MAX_MESSAGES]:
        text = item.get("msg", item.get("message")) if isinstance(item, dict) else item
        if not isinstance(text, str) or not text.strip():
            raise Unreadable(f"its `{rule}` holds {_shown(item)}, which is not a message: a non-empty string, or an "
                             "object with a string `msg`")
        out.append(text[:MAX_MESSAGE_CHARS])
    if len(items) > MAX_MESSAGES:
        out.append(f"... and {len(items) - MAX_MESSAGES} more")
    return out


def _query(policy: CompiledPolicy, document: dict[str, Any]) -> tuple[str | None, str]:
    """(the output's JSON text, '') or (None, the error's S-expression). The C API is called
    directly: regopy's `Output` parses the text in its constructor, and a text rego-cpp got
    wrong (a `%s` of a string in `sprintf` keeps its quotes) failed inside it, leaving an
    output half made that brought the process down later."""
    rego = policy._interpreter
    rego.set_input_term(json.dumps(document, default=str))
    output = rego_bundle_query(rego._impl, policy._bundle._impl)
    try:
        if rego_output_ok(output):
            text = rego_output_string(output)
            # An error found while evaluating (a recursion) comes back as an "ok" output whose
            # text is the error's S-expression, not JSON.
            return (None, text) if text.lstrip().startswith("(error") else (text, "")
        return None, _node_text(rego_output_node(output))
    finally:
        rego_free_output(output)


def evaluate_one(policy: CompiledPolicy, document: dict[str, Any]) -> Verdict:
    try:
        text, error = _query(policy, document)
    except RegoError as err:
        return _failed(policy, first_problem(errors(str(err), policy.source)))
    if text is None:
        return _failed(policy, first_problem(errors(error, policy.source)))
    try:
        parsed = json.loads(text) if text != "undefined" else {}
    except ValueError:
        return _failed(policy, Problem(0, "its result is not readable JSON (a string with quotes in it, from sprintf?)"))
    first = parsed[0] if isinstance(parsed, list) and parsed else parsed
    result = first.get("bindings", {}).get("x", {}) if isinstance(first, dict) else {}
    result = result if isinstance(result, dict) else {}
    try:
        denials, warnings = _messages(result.get("deny"), "deny"), _messages(result.get("warn"), "warn")
    except Unreadable as err:
        return _failed(policy, Problem(0, str(err)))
    return Verdict(tuple(Finding(policy.name, policy.version, m) for m in denials),
                   tuple(Finding(policy.name, policy.version, m) for m in warnings))


def _failed(policy: CompiledPolicy, problem: Problem) -> Verdict:
    where = f" (line {problem.line})" if problem.line else ""
    return Verdict((Finding(policy.name, policy.version,
                            f"policy {policy.name!r} failed to evaluate{where}: {problem.message}; denied (fail closed)"),))


def evaluate(policies: Iterable[CompiledPolicy], document: dict[str, Any]) -> Verdict:
    """Every policy on the same input: all denials and all warnings, in the policies' order."""
    denials: list[Finding] = []
    warnings: list[Finding] = []
    for policy in policies:
        verdict = evaluate_one(policy, document)
        denials += verdict.denials
        warnings += verdict.warnings
    return Verdict(tuple(denials), tuple(warnings))
