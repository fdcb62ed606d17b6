"""A policy checked as `muster policy apply` checks it now, and the policies the log holds made
ready to evaluate (pure but for rego-cpp, which compiles them).

`problems` is every check of an apply: it compiles (its line and reason), reads nothing its
input never has (`references`), and makes none of the mistakes rego-cpp compiles and OPA refuses
or that never hold (`bindings`, `redeclared`). A policy the log holds that fails one (applied
before the check existed, by an older muster) is not run as it was stored: it compiled, so it
ran, and a `deny` over an unbound name allowed everything while its author believed a limit was in
place. It denies every operation it judges instead (fail closed), saying which check it fails
and how to end that: apply it again corrected, or delete it (docs/governance.md, "A policy
applied before a check").
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence

from . import bindings, redeclared
from .policies import MAX_MESSAGE_CHARS, CompiledPolicy, PolicyCompileError, compile_policy, is_builtin
from .references import unknown_inputs


def problems(name: str, source: str, version: int = 0) -> tuple[CompiledPolicy | None, list[str]]:
    """The policy compiled, or None and every problem `policy apply` refuses it for (each
    names the policy and, where it has one, the line)."""
    try:
        compiled = compile_policy(name, source, version)
    except PolicyCompileError as err:
        # rego-cpp refuses a function's argument assigned in its body without a word; said here.
        return None, [str(err), *redeclared.mistakes(name, source)]
    unknown = unknown_inputs(source)
    if unknown:
        return None, [f"policy {name!r} reads what its input never has (undefined: a rule on it never holds): {u}"
                      for u in unknown]
    wrong = bindings.mistakes(name, source, is_builtin)
    return (None, wrong) if wrong else (compiled, [])


def fails_closed(name: str, version: int, found: list[str]) -> str:
    """What a stored policy that fails a check denies with: the check, and what ends it, within
    the characters a message keeps (`policies.MAX_MESSAGE_CHARS`)."""
    head = f"policy {name!r} (version {version}) fails a check `muster policy apply` makes now: "
    more = f" (and {len(found) - 1} more: `muster policy list`)" if len(found) > 1 else ""
    tail = (f"; every operation it judges is denied (fail closed) until it is applied again corrected or deleted "
            f"(`muster policy delete {name}`)")
    room = MAX_MESSAGE_CHARS - len(head) - len(more) - len(tail)
    said = found[0].removeprefix(f"policy {name!r} ") if found else "no longer compiles"
    return head + (said if len(said) <= room else said[: room - 3] + "...") + more + tail


@functools.lru_cache(maxsize=256)
def failed(name: str, version: int, source: str) -> tuple[str, ...]:
    """The checks a stored policy fails (none: it is judged as written), compiled once per version
    by a reader that lists policies (the console, the tracker's HTTP list)."""
    compiled, found = problems(name, source, version)
    return () if compiled is not None else tuple(found) or ("no longer compiles",)


def listed_warnings(items: Sequence[dict[str, object]]) -> list[str]:
    """`fails_closed` of each listed policy (`name`, `version`, `entity.source`) that fails a
    check, as `muster policy list --json` carries them."""
    out = []
    for item in items:
        entity = item.get("entity")
        source = str(entity.get("source", "")) if isinstance(entity, dict) else ""
        name, version = str(item.get("name")), int(str(item.get("version") or 0))
        found = failed(name, version, source)
        if found:
            out.append(fails_closed(name, version, list(found)))
    return out


def compile_all(sources: Sequence[tuple[str, str, int]]) -> list[CompiledPolicy]:
    """(name, source, version) of each policy the log holds, ready to evaluate; one that fails
    a check of `policy apply` denies every operation, saying so."""
    out = []
    for name, source, version in sources:
        compiled, found = problems(name, source, version)
        out.append(compiled if compiled is not None else _denying(name, version, fails_closed(name, version, found)))
    return out


def _denying(name: str, version: int, reason: str) -> CompiledPolicy:
    return compile_policy(name, f"package muster.failed\n\ndeny := [{json.dumps(reason)}]\n", version)
