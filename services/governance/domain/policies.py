"""Policies as code: Rego modules compiled and evaluated in-process (regopy, the rego-cpp
interpreter; no OPA server to run).

`compile_policy` refuses a module that does not compile, naming the line and the reason;
`evaluate` is a pure function of the compiled policies and one input document: each policy's
`deny` (a set or list of messages, a message, or `true`) refuses, its `warn` is shown and
recorded. A policy whose evaluation fails (a conflict between rules, a built-in's error such as
a division by zero) denies, saying why: fail closed.

rego-cpp reports errors as nodes whose text is an S-expression, `(error <n>:<file>|<offset>|<length>
(errormsg <n>:<message>) ...)` with length-prefixed strings; `_errors` reads the file offset
(turned into a line of the source) and the message from it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
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

_PACKAGE = re.compile(r"^\s*package\s+([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\s*$", re.MULTILINE)
_LOCATED = re.compile(r"\(error (\d+):")
_MESSAGE = re.compile(r"\(errormsg (\d+):")
MAX_MESSAGES = 20
"""Messages kept from one policy's `deny` or `warn` (a rule over every node could make thousands)."""
MAX_MESSAGE_CHARS = 500


class PolicyCompileError(ValueError):
    """The module does not compile: `line` (1-based, 0 when unknown) and `reason`."""

    def __init__(self, name: str, line: int, reason: str) -> None:
        self.name, self.line, self.reason = name, line, reason
        where = f" (line {line})" if line else ""
        super().__init__(f"policy {name!r} does not compile{where}: {reason}")


@dataclass(frozen=True)
class Problem:
    line: int
    message: str


def _length_prefixed(text: str, at: int) -> tuple[str, int]:
    """`<n>:<n characters>` at `at` -> (the characters, the index after them)."""
    colon = text.index(":", at)
    n = int(text[at:colon])
    return text[colon + 1 : colon + 1 + n], colon + 1 + n


def _errors(sexpr: str, source: str) -> list[Problem]:
    """Every `(error ...)` of an error node's text, with the line its offset falls on."""
    problems: list[Problem] = []
    for start in [m.start() for m in re.finditer(r"\(error\b", sexpr)]:
        line = 0
        located = _LOCATED.match(sexpr, start)
        if located is not None:
            _, after = _length_prefixed(sexpr, located.start(1))
            offset = sexpr[after:].split("|", 2)
            if len(offset) > 1 and offset[1].isdigit():
                line = source.encode()[: int(offset[1])].count(b"\n") + 1
        found = _MESSAGE.search(sexpr, start)
        message = _length_prefixed(sexpr, found.start(1))[0] if found is not None else "error"
        problems.append(Problem(line, message))
    return problems or [Problem(0, sexpr.strip()[:300] or "unknown error")]


def _node_text(node: Any) -> str:
    """An error node's S-expression: its children's, or its own when it has none."""
    texts = [rego_node_json(rego_node_get(node, i)) for i in range(rego_node_size(node))]
    return "\n".join(texts) if texts else str(rego_node_json(node))


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
    if not re.search(r"^\s*(deny|warn)\b", source, re.MULTILINE):
        raise PolicyCompileError(name, 0, "it defines neither `deny` nor `warn`: a policy says what it refuses or warns of")
    rego = _interpreter()
    try:
        rego.add_module(f"{name}.rego", source)
    except RegoError as err:
        first = _errors(str(err), source)[0]
        raise PolicyCompileError(name, first.line, first.message) from None
    bundle = rego.build(f"x := data.{package}", [])
    if not bundle.ok():
        first = _errors(_node_text(rego_bundle_node(bundle._impl)), source)[0]
        raise PolicyCompileError(name, first.line, first.message)
    return CompiledPolicy(name, version, package, source, rego, bundle)


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
        return _failed(policy, _errors(str(err), policy.source)[0])
    if text is None:
        return _failed(policy, _errors(error, policy.source)[0])
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


def compile_all(sources: Sequence[tuple[str, str, int]]) -> list[CompiledPolicy]:
    """(name, source, version) of each policy the log holds; one that no longer compiles (a newer
    rego-cpp) becomes a policy that denies, saying so: fail closed."""
    out = []
    for name, source, version in sources:
        try:
            out.append(compile_policy(name, source, version))
        except PolicyCompileError as err:
            out.append(_broken(name, version, str(err)))
    return out


def _broken(name: str, version: int, reason: str) -> CompiledPolicy:
    text = json.dumps(f"{reason}; denied (fail closed)")
    return compile_policy(name, f"package muster.broken\n\ndeny := [{text}]\n", version)
