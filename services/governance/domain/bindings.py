"""Two mistakes a policy compiles with and never says (pure; `entities.problems_of` refuses them at
apply, naming the line, as `references.unknown_inputs` refuses a misspelt input field).

- **A name nothing binds.** `input.request.nodes > limit` where no rule, import, assignment,
  `some` or reference binds `limit` (a typo of `limits`, a rule of another module): OPA refuses
  it at compile (`var limit is unsafe`); rego-cpp compiles it, and the body never holds, so the
  policy allows what it was written to refuse. Found conservatively: a name bound anywhere in
  the module (a rule's head, an import, the left of `:=` or either side of `=`, a `some` or
  `every`, a reference's brackets `xs[i]`, `walk`'s output) counts as bound everywhere, so what
  is said is a name the module never binds at all.
- **A call of no function**: `nosuchfn(x)`, a built-in rego-cpp does not have (`http.send`,
  `net.cidr_contains`, v0's `any`), compiles, and every request reaching it is denied as "failed
  to evaluate" (fail closed): the tenant is refused everything until someone reads why.
- **`deny[msg] { ... }`**, Rego v0's partial set, is an object in Rego v1 (`{"msg": true}`):
  `deny` would never read as messages, and every request it holds for would be denied as
  "failed to evaluate". Said with what to write instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from . import redeclared
from .rego_text import KEYWORDS, blanked, depths

_NAME = re.compile(r"(?<![\w.])([A-Za-z_]\w*)")
_CALL = re.compile(r"\s*(?:\.\s*[A-Za-z_]\w*\s*)*\(")
_REF_BRACKETS = re.compile(r"(?<=[\w\]\)])\s*\[([^\[\]]*)\]")
_OBJECT_RULE = re.compile(r"^[ \t]*(deny|warn)[ \t]*\[[ \t]*([A-Za-z_]\w*)[ \t]*\][ \t]*(?:\{|if\b)", re.MULTILINE)


def _bound(code: str, depth: list[int]) -> set[str]:
    bound: set[str] = set()
    for whole in code.splitlines():
        words = whole.split()
        if words and words[0] == "import":
            bound.add(_NAME.findall(whole)[-1])
            continue
        # Each statement of the line: `[z | some y in ys; z := y]` binds z after its `;` and `|`.
        for line in re.split(r"[;|]", whole):
            _bound_in(line, bound)
    for found in _REF_BRACKETS.finditer(code):
        bound.update(_NAME.findall(found.group(1)))
    for found in re.finditer(r"\bwalk\s*\(([^()]*)\)", code):
        bound.update(_NAME.findall(found.group(1)))
    bound.update(m.group(1) for m in _NAME.finditer(code) if depth[m.start()] == 0)  # heads: rules, functions' arguments
    return bound


def _bound_in(line: str, bound: set[str]) -> None:
    for op in (":=", "="):
        head, sep, tail = line.partition(op) if op == ":=" else _unify(line)
        if sep:
            bound.update(_NAME.findall(head))
            if op == "=":
                bound.update(_NAME.findall(tail))
    for keyword in ("some", "every"):
        found = re.search(rf"\b{keyword}\b(.*?)(?:\bin\b|$|\{{)", line)
        if found:
            bound.update(_NAME.findall(found.group(1)))


def _unify(line: str) -> tuple[str, str, str]:
    """`a = b` split at its `=` (not `==`, `:=`, `!=`, `<=`, `>=`): unification binds either side."""
    found = re.search(r"(?<![=:!<>])=(?!=)", line)
    return (line[:found.start()], "=", line[found.end():]) if found else (line, "", "")


def unbound(source: str) -> list[tuple[int, str]]:
    """(line, name) of each name a rule's body reads that nothing in the module binds, once each."""
    code = blanked(source)
    depth = depths(code)
    bound = _bound(code, depth)
    said: list[tuple[int, str]] = []
    for found in _NAME.finditer(code):
        name = found.group(1)
        if name in KEYWORDS or name in bound or depth[found.start()] == 0 or _CALL.match(code, found.end()):
            continue
        if name not in {n for _, n in said}:
            said.append((code.count("\n", 0, found.start()) + 1, name))
    return said


def object_rules(source: str) -> list[tuple[int, str]]:
    """(line, what to write instead) of each `deny[msg]`/`warn[msg]` rule."""
    code = blanked(source)
    return [(code.count("\n", 0, m.start()) + 1, f"`{m.group(1)}[{m.group(2)}]` makes {m.group(1)} an object, not messages "
             f"(Rego v0's partial set is an object in Rego v1): write `{m.group(1)} contains {m.group(2)} if {{ ... }}`")
            for m in _OBJECT_RULE.finditer(code)]


_CALLED = re.compile(r"(?<![\w.])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\s*\(")
PRINT = "print"
"""What rego-cpp evaluates that its `is_builtin` does not name (`muster policy test` shows it)."""


def unknown_calls(source: str, is_builtin: Callable[[str], bool]) -> list[tuple[int, str]]:
    """(line, name) of each call of a name that is neither a function of the module (a head
    `f(x) := ...`) nor a built-in, once each."""
    code = blanked(source)
    depth = depths(code)
    defined = {m.group(1) for m in re.finditer(r"^[ \t]*([A-Za-z_]\w*)\s*\(", code, re.MULTILINE) if depth[m.start(1)] == 0}
    said: list[tuple[int, str]] = []
    for found in _CALLED.finditer(code):
        called = found.group(1)
        if called in defined or called in KEYWORDS or called == PRINT or called in {n for _, n in said} or is_builtin(called):
            continue
        said.append((code.count("\n", 0, found.start()) + 1, called))
    return said


def mistakes(name: str, source: str, is_builtin: Callable[[str], bool] | None = None) -> list[str]:
    """Each of them, as `policy apply` and `muster policy test` refuse them (`is_builtin`: the
    interpreter's, `policies.is_builtin`; None: calls are not judged)."""
    calls = unknown_calls(source, is_builtin) if is_builtin is not None else []
    return [*(f"policy {name!r} (line {line}): {why}" for line, why in object_rules(source)),
            *redeclared.mistakes(name, source),
            *(f"policy {name!r} (line {line}) calls `{called}`, which is neither a function of the policy nor a built-in of "
              f"rego-cpp (the interpreter muster evaluates policies with): every request reaching it would be denied as "
              f"failed to evaluate" for line, called in calls),
            *(f"policy {name!r} (line {line}) reads `{var}`, which no rule, import, `:=`, `some` or reference of it binds: "
              f"a rule reading it never holds, so the policy would allow what it refuses (OPA: var {var} is unsafe)"
              for line, var in unbound(source))]
