"""rego-cpp's errors read into a line and a sentence a policy's author can act on (pure).

rego-cpp reports an error as a node whose text is an S-expression, `(error <n>:<file>|<offset>|
<length> (errormsg <n>:<message>) (errorast ...))`, with length-prefixed strings. Some errors
(two definitions of a function with different arities, a set rule beside a complete one) carry
no offset of their own, only their AST's nodes do (`(rego-term 6:p.rego|48|1`), and were said
without a line until session 34; and its messages are terse (`Invalid literal`), so each known
one gets what it usually means, and the refusal quotes the line.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .rego_text import blanked, depths

_LOCATED = re.compile(r"\(error (\d+):")
_MESSAGE = re.compile(r"\(errormsg (\d+):")
_NODE_AT = re.compile(r"\((?:rego|error)[\w-]* (?:\d+:[^|()\s]*)?\|(\d+)\|(\d+)")

HINTS = {
    "this is unclosed": "a `{`, `[`, `(` or string opened here is never closed",
    "Syntax error": "a `}`, `]` or `)` closes what is not open, or a word is out of place",
    "Invalid literal": "a statement rego-cpp cannot read as an expression (a stray character or quote, or a second `package`)",
    "Invalid collection": "an array, set or object written wrong (a missing comma or value, a `:` outside an object)",
    "Invalid sequence": "a `,` or `;` where no statement or item follows",
    "Invalid import declaration": "an import is `import rego.v1`, `import future.keywords...` or `import data.<path>`, "
                                  "after `package` and before every rule",
    "Invalid rule head": "a rule starts `name :=`, `name if`, `name contains x if` or `f(x) :=`",
    "Invalid assignment operator": "what is left or right of `:=` or `=` is not a term",
    "Invalid boolean operator": "a comparison (`==`, `<`, `>=`...) lacks a side",
    "Invalid arithmetic operator": "`+`, `-`, `*`, `/` or `%` lacks a side",
    "Unable to unify due to cycle": "names that depend on each other (`x = x + 1`, or `a = b` with `b = a`)",
    "Invalid rule body for set rule": "`deny contains ...` and `deny := ...` (or `deny if`) in one policy: a rule is a set "
                                      "or a value, not both",
}
UNSAID = "rego-cpp refuses it without saying why"


@dataclass(frozen=True)
class Problem:
    line: int
    message: str
    last_line: int = 0
    """The last line its node spans, when more than `line` (rego-cpp names a whole rule)."""
    pinpointed: bool = False
    """Its node is the text rego-cpp could not read (`(invalid ...)`), not what it read before."""


def length_prefixed(text: str, at: int) -> tuple[str, int]:
    """`<n>:<n characters>` at `at` -> (the characters, the index after them)."""
    colon = text.index(":", at)
    n = int(text[at:colon])
    return text[colon + 1 : colon + 1 + n], colon + 1 + n


def _span(sexpr: str, start: int, end: int, after_message: int) -> tuple[int, int] | None:
    """(offset, length) an error names: its own, else the first node's of its AST."""
    located = _LOCATED.match(sexpr, start)
    if located is not None:
        _, after = length_prefixed(sexpr, located.start(1))
        parts = sexpr[after:].split("|", 3)
        if len(parts) > 2 and parts[1].isdigit():
            length = re.match(r"\d+", parts[2])
            return int(parts[1]), int(length.group(0)) if length else 0
    node = _NODE_AT.search(sexpr, max(after_message, start), end)
    return (int(node.group(1)), int(node.group(2))) if node is not None else None


def errors(sexpr: str, source: str) -> list[Problem]:
    """Every `(error ...)` of an error node's text, with the lines its offset and length fall on."""
    problems: list[Problem] = []
    data = source.encode()
    starts = [m.start() for m in re.finditer(r"\(error\b", sexpr)]
    for start, end in zip(starts, [*starts[1:], len(sexpr)], strict=False):
        found = _MESSAGE.search(sexpr, start, end)
        message, after = length_prefixed(sexpr, found.start(1)) if found is not None else ("error", start)
        span = _span(sexpr, start, end, after)
        if span is None:
            problems.append(Problem(0, message))
            continue
        line = data[: span[0]].count(b"\n") + 1
        last = data[: span[0] + max(span[1] - 1, 0)].rstrip().count(b"\n") + 1
        problems.append(Problem(line, message, last if last > line else 0, "(invalid " in sexpr[start:end]))
    return problems or [Problem(0, sexpr.strip()[:300] or UNSAID)]


def first(problems: list[Problem]) -> Problem:
    """The problem to tell: the first text rego-cpp could not read, else the first problem. A
    stray `}` after a rule is two errors, the rules read before it (lines 3-7: said alone, the
    author looked for the mistake there) and the `}` itself."""
    return next((p for p in problems if p.pinpointed), problems[0])


def statements(source: str) -> list[tuple[int, int]]:
    """(start, end) offsets of each statement outside every brace after the package and
    imports: a rule with its body and its `else`s."""
    code = blanked(source)
    depth = depths(code)
    starts, at = [], 0
    for line in code.splitlines(keepends=True):
        word = line.split(maxsplit=1)[0] if line.strip() else ""
        if line[:1].strip() and depth[at] == 0 and word not in ("package", "import", "else") and not word.startswith(("}", "]", ")")):
            starts.append(at)
        at += len(line)
    return list(zip(starts, [*starts[1:], len(source)], strict=True))


def refused_statement(source: str, builds: Callable[[str], bool]) -> Problem | None:
    """The first statement from which the module stops building, by bisecting its prefixes (a
    rule added to a module that does not build does not make it build): rego-cpp refuses some
    modules with no error at all (a function's argument assigned again in its body: `f(x) := y
    if { x := 2 ... }`), and its author was told `rego-errorseq(0x7f...)`."""
    spans = statements(source)
    low, high = 0, len(spans)  # the first failing prefix is in [low, high); high: none fails
    while low < high:
        mid = (low + high) // 2
        if builds(source[: spans[mid][1]]):
            low = mid + 1
        else:
            high = mid
    if low == len(spans):
        return None
    start, end = spans[low]
    line = source[:start].count("\n") + 1
    last = source[:end].rstrip().count("\n") + 1
    return Problem(line, UNSAID, last if last > line else 0, True)


def explained(problem: Problem, source: str) -> str:
    """The message, what it usually means, and the line's text (`... : f(x, y) := 2`)."""
    hint = HINTS.get(problem.message)
    text = problem.message + (f": {hint}" if hint else "")
    lines = source.splitlines()
    if 0 < problem.line <= len(lines) and (shown := lines[problem.line - 1].strip()):
        text += f"; line {problem.line} reads `{shown[:120]}`"
    if problem.last_line:
        text += f"; the mistake is in lines {problem.line}-{problem.last_line}"
    if problem.message == UNSAID:
        text += " (the module's first rules build without it, and not with it)"
    return text
