"""A local declared twice in one rule body, which OPA refuses and rego-cpp runs (pure).

`x := 1` then `x := 2` in one body: OPA refuses the module (`var x assigned above`), and so it
does after `some x` (`declared above`), after `x` was read (`referenced above`), and for a
function's argument (`arg x redeclared`). rego-cpp compiles it and takes the second value (or,
after `some x in xs`, every element of `xs` as well as the new value), so a policy its author
checked with `opa` (refused there) ran in muster with another meaning. `policy apply` refuses it
as OPA does, naming the line (`bindings.mistakes`).

Each bracket is a scope, as OPA's are: a comprehension may declare a name again (OPA looks for
an earlier declaration in the innermost scope only), and what is read inside a nested bracket
or before a comprehension's `|` (its head is read after its body) does not count as read.
Statements end at a newline or `;` of their own scope. OPA gives each `else` body of a function
its arguments as its first body has them (`arg x redeclared`), and an `every` body a scope of
its own that has `every`'s names (`every k, v in xs { v := 1 }`: `var v declared above`); until
session 35 neither was checked (an `else` body started with no arguments, an `every` body with
none of its names).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .rego_text import KEYWORDS, blanked

_NAME = re.compile(r"(?<![\w.])[A-Za-z_]\w*")
_HEAD_ARGS = re.compile(r"^[ \t]*[A-Za-z_][\w.]*\s*\(([^()]*)\)[^\n]*\{?[ \t]*$")  # (its value may hold braces: `f(a) := {"k": a} if {`)
_OPENS = {"{": "}", "[": "]", "(": ")"}
_SOME = re.compile(r"(?<![\w.])some\b")
_ELSE = re.compile(r"\s*else\b")
_CONTINUED = re.compile(r"\s*(?:\}|else\b)")  # `} else := {"k": a} if {`: the rule above goes on
_EVERY = re.compile(r"\s*every\s+([\w\s,]+?)\s+in\b")
OPA_WORDS = {"assigned": "var {} assigned above", "declared": "var {} declared above",
             "referenced": "var {} referenced above", "arg": "arg {} redeclared", "every": "var {} declared above"}


@dataclass
class _Scope:
    stmt: int
    """Where the statement being read in it starts."""
    known: dict[str, str] = field(default_factory=dict)
    """name -> how this scope has it already: assigned, declared (`some`), referenced, arg, every."""


def _names(text: str) -> list[str]:
    return [n for n in _NAME.findall(text) if n not in KEYWORDS and not n.startswith("_")]


def _is_call(code: str, end: int) -> bool:
    return bool(re.match(r"\s*\(", code[end:end + 64]))


def redeclared(source: str) -> list[tuple[int, str, str, str]]:
    """(line, name, how its scope had it: a key of OPA_WORDS, `:=` or `some`) of each `:=` or
    `some` of a name its scope already has, once per (line, name)."""
    code = blanked(source)
    scopes = [_Scope(0)]
    said: dict[tuple[int, str], tuple[str, str]] = {}

    def declare(names: list[str], at: int, how: str) -> None:
        for name in names:
            if (known := scopes[-1].known.get(name)) is not None:
                said.setdefault((code.count("\n", 0, at) + 1, name), (known, ":=" if how == "assigned" else "some"))
            scopes[-1].known.setdefault(name, how)

    i = 0
    args: list[str] = []  # the arguments of the function whose bodies are being read (its `else`s have them)
    ended = 0  # where the last rule body ended (an `else` follows it)
    while i < len(code):
        ch, scope = code[i], scopes[-1]
        inside = len(scopes) > 1
        if ch == "{" and not inside:
            line = code[code.rfind("\n", 0, i) + 1 : i + 1]
            if not _ELSE.match(code, ended, i) and not _CONTINUED.match(line):  # a rule of its own
                head = _HEAD_ARGS.match(line)
                args = _names(head.group(1)) if head else []
            scopes.append(_Scope(i + 1, dict.fromkeys(args, "arg")))
        elif ch in _OPENS:
            every = _EVERY.match(code[scope.stmt:i]) if ch == "{" else None
            scopes.append(_Scope(i + 1, dict.fromkeys(_names(every.group(1)), "every") if every else {}))
        elif ch in "}])" and inside:
            scopes.pop()
            ended = i + 1 if ch == "}" and len(scopes) == 1 else ended  # a body, not an `else`'s value: `else := [a] if {`
        elif ch in "\n;|" and inside:
            _read(code, scope, scope.stmt, i)
            if ch == "|":  # a comprehension's head is read after its body
                scope.known = {n: k for n, k in scope.known.items() if k != "referenced"}
            scope.stmt = i + 1
        elif inside and code.startswith(":=", i):
            declare(_names(code[scope.stmt:i]), i, "assigned")
            i = scope.stmt = i + 2
            continue
        elif inside and _SOME.match(code, i) and not code[scope.stmt:i].strip():
            end = _end_of_some(code, i)
            declare(_names(code[i + 4 : end]), i, "declared")
            i = scope.stmt = end
            continue
        i += 1
    return [(line, name, how, op) for (line, name), (how, op) in said.items()]


def mistakes(name: str, source: str) -> list[str]:
    """Each, as `policy apply` refuses it."""
    before = {"assigned": "assigned it above", "declared": "declared it (`some`) above", "referenced": "read it above",
              "arg": "has it as an argument", "every": "has it as a name of its `every`"}
    return [f"policy {name!r} (line {line}) declares `{var}` with `{op}` where its rule body {before[how]} (OPA refuses "
            f"it: {OPA_WORDS[how].format(var)}): give it another name, or compare with `==`" for line, var, how, op in redeclared(source)]


def _end_of_some(code: str, at: int) -> int:
    """Where the names of `some x, y` or `some k, v in xs` end: `in`, a newline or `;`."""
    stop = re.compile(r"\bin\b|[\n;}\]]")
    found = stop.search(code, at + 4)
    return found.start() if found else len(code)


def _read(code: str, scope: _Scope, start: int, end: int) -> None:
    """The names a statement of `scope` reads outside its nested brackets: each is `referenced`
    in it unless the scope has it already (a call's name is not, nor `every`'s own names: `every
    k, v in xs { ... }` declares them for its body only)."""
    depth, every = 0, False
    for m in re.finditer(r"[{}\[\]()]|(?<![\w.])[A-Za-z_]\w*", code[start:end]):
        token = m.group(0)
        if token in "{[(":
            depth += 1
        elif token in "}])":
            depth -= 1
        elif depth == 0 and token in ("every", "in"):
            every = token == "every"
        elif (depth == 0 and not every and token not in KEYWORDS and not token.startswith("_")
              and not _is_call(code, start + m.end())):
            scope.known.setdefault(token, "referenced")
