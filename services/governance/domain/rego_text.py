"""A Rego module's text as the checks of `bindings`, `redeclared` and `rego_errors` read it (pure):
strings and comments blanked, brace depths, Rego's own words."""

from __future__ import annotations

import re

STRING_OR_COMMENT = re.compile(r'"(?:[^"\\\n]|\\.)*"|`[^`]*`|#[^\n]*')
KEYWORDS = frozenset({"package", "import", "as", "default", "else", "if", "contains", "some", "in", "every", "not", "with",
                      "true", "false", "null", "data", "input", "future", "rego", "v1", "keywords", "_"})


def blanked(source: str) -> str:
    """Strings and comments as blanks of their length (newlines kept: lines stay where they were)."""
    return STRING_OR_COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), source)


def depths(code: str) -> list[int]:
    """The brace depth at each character (0: a rule's head, outside every body)."""
    out, depth = [], 0
    for ch in code:
        if ch == "}":
            depth = max(depth - 1, 0)
        out.append(depth)
        if ch == "{":
            depth += 1
    return out


_FUNCTION_HEAD = re.compile(r"^[ \t]*([A-Za-z_][\w.]*)[ \t]*\(([^()\n]*)\)[ \t]*(?=:=|=|if\b|\{|contains\b|$)", re.MULTILINE)


def _count_arguments(text: str) -> int:
    """Arguments of a head's parentheses: commas outside brackets, plus one (none when empty)."""
    depth, count = 0, 1
    for ch in text:
        depth += ch in "[{"
        depth -= ch in "]}"
        count += ch == "," and depth == 0
    return count if text.strip() else 0


def other_arities(source: str) -> list[tuple[int, str, int, int, int]]:
    """(line, name, its arguments there, the arguments it had first, that line) of each head of
    a function with another number of arguments than its first (`f(x)` and `f(x, y)`)."""
    code = blanked(source)
    depth = depths(code)
    first: dict[str, tuple[int, int]] = {}
    found = []
    for m in _FUNCTION_HEAD.finditer(code):
        if depth[m.start(1)]:
            continue
        line, n = code.count("\n", 0, m.start(1)) + 1, _count_arguments(m.group(2))
        before = first.setdefault(m.group(1), (n, line))
        if before[0] != n:
            found.append((line, m.group(1), n, *before))
    return found
