"""What a policy reads of its input, checked against what the input has (pure).

Rego reads a field the input does not have as undefined, and a rule over it never holds: a
`deny` on `input.request.node_count > 20` (the field is `nodes`) compiles, evaluates and allows
every request, and its author believes a limit is in place. `unknown_inputs` finds every
`input.a.b` path in a policy's source (not in its comments or strings) and names those the input
document (`inputs.py`, docs/governance.md) never has, with the fields that level does have.
Below a map whose keys are the user's (labels, config, a request's values, the layout's
entries) nothing is checked.
"""

from __future__ import annotations

import json
import re
import typing
from typing import Any

from contracts.commands import AnyCommand

from .rego_text import STRING_OR_COMMENT

ANY: dict[str, Any] = {}
"""A level whose keys are not known in advance: anything below it is read as it is."""
LEAF = None
"""A number or a string: nothing is below it."""


def _request_fields() -> dict[str, Any]:
    """Every field any operation's command has (`input.request` is the command as sent)."""
    union = typing.get_args(typing.get_args(AnyCommand)[0])
    return {name: ANY for model in union for name in model.model_fields}


SHAPE: dict[str, Any] = {
    "tenant": {"name": LEAF, "clusters": LEAF, "nodes": LEAF, "per_hour": LEAF},
    "operation": LEAF, "now": LEAF, "now_ns": LEAF,
    "requester": {"id": LEAF, "role": LEAF},
    "request": _request_fields(),
    "cluster": {"id": LEAF, "name": LEAF, "template": LEAF, "provider": LEAF, "status": LEAF, "nodes": LEAF,
                "labels": ANY, "config": ANY, "lease_expires_at": LEAF, "owner": LEAF},
    "layout": ANY,
    "nodes": {"before": LEAF, "after": LEAF},
    "plan": {"tasks": LEAF, "actions": ANY},
    "cost": {"per_hour": LEAF, "before_per_hour": LEAF, "by_hardware": ANY, "before_by_hardware": ANY, "unknown": ANY},
}

_PATH = re.compile(r'(?<![\w.])input((?:\s*\.\s*[A-Za-z_]\w*|\s*\[\s*"(?:[^"\\]|\\.)*"\s*\])+)')
_STEP = re.compile(r'\.\s*([A-Za-z_]\w*)|\[\s*"((?:[^"\\]|\\.)*)"\s*\]')


def _code(source: str) -> str:
    """The source without its comments, and with every string but a bracketed key emptied (a
    message may say `input.x`; `input["x"]` reads it)."""
    out, at = [], 0
    for found in STRING_OR_COMMENT.finditer(source):
        out.append(source[at:found.start()])
        text = found.group(0)
        keyed = text[0] in '"`' and _after_bracket(source, found.start())
        out.append(_key(text) if keyed else ('""' if text[0] in '"`' else ""))
        at = found.end()
    out.append(source[at:])
    return "".join(out)


def _key(text: str) -> str:
    """A bracketed key as the key it is (`input["ten\\u0061nt"]` and ``input[`tenant`]`` read as
    `input.tenant`: taken so when deciding what a policy reads, erring on the side of reading),
    written plainly; an escape JSON would refuse is left as written."""
    try:
        value = text[1:-1] if text[0] == "`" else json.loads(text)
    except ValueError:
        return text
    return json.dumps(value, ensure_ascii=False)


def _after_bracket(source: str, at: int) -> bool:
    """Whether only blanks stand between a `[` and `at` (a string there is a key)."""
    at -= 1
    while at >= 0 and source[at] in " \t\r\n":
        at -= 1
    return at >= 0 and source[at] == "["


def _check(steps: list[str]) -> str:
    """Why `input.<steps>` is never defined ('' when it may be)."""
    level: Any = SHAPE
    for i, step in enumerate(steps):
        path = ".".join(["input", *steps[:i]])
        if level is LEAF:
            return f"{path}.{step}: {path} is a number or a string, with no fields"
        if level is ANY:
            return ""
        if step not in level:
            return f"{path}.{step}: {path} has no field {step!r} (it has {', '.join(sorted(level))})"
        level = level[step]
    return ""


def _paths(source: str) -> list[list[str]]:
    """Every `input.a.b` path the policy reads, as its steps, in source order."""
    return [[m.group(1) or m.group(2) for m in _STEP.finditer(found.group(1))] for found in _PATH.finditer(_code(source))]


def unknown_inputs(source: str) -> list[str]:
    """Every input path the policy reads that the input never has, once each, in source order."""
    problems: list[str] = []
    for steps in _paths(source):
        problem = _check(steps)
        if problem and problem not in problems:
            problems.append(problem)
    return problems


def absent_inputs(source: str, document: dict[str, Any]) -> list[str]:
    """Every input path the policy reads that the input always has but this `document` lacks
    (or holds a number or a string where the policy reads below it), once each: `muster policy
    test` on a hand-written input with a typo, or another shape, said `allowed`, every rule on
    a missing field never holding. A null (`cluster` of a create) and the user's maps are not
    judged: the real input has them so."""
    said: list[str] = []
    for steps in _paths(source):
        level, value = SHAPE, document
        for i, step in enumerate(steps):
            path = ".".join(["input", *steps[:i]])
            if level is ANY or level is LEAF or value is None or step not in level:
                break  # (a path the input never has is unknown_inputs' to say)
            if not isinstance(value, dict):
                problem = f"{path}.{step}: this input's {path} is {value!r}, with no fields"
            elif step not in value:
                problem = f"{path}.{step}: this input's {path} has no field {step!r}" if i else f"input.{step}: this input has no field {step!r}"
            else:
                level, value = level[step], value[step]
                continue
            if problem not in said:
                said.append(problem)
            break
    return said


_WHOLE = re.compile(r'(?<![\w.])input(?!\s*(?:\.|\[\s*"))(?!\w)')


def reads_tenant_totals(source: str) -> bool:
    """Whether the policy may read the tenant's totals (`input.tenant.clusters|nodes|per_hour`):
    the policies whose verdict another planner's admission can change, so their tenant's
    admissions reserve what they add (docs/decisions/0044-a-tenant-s-spend-is-shared-by-shard.md).
    `input` read whole (`input[k]`, `x := input`) is taken as reading them. Each policy is
    compiled and evaluated alone (`policies.compile_policy`: `import data.<another>` reads
    undefined), so what its verdict reads of `input` is in its own source; a tenant reserves if
    any of its policies reads them (`Rules.spends`), a library module binding `input.tenant` to
    a variable included."""
    return reads_input(source, "tenant", but="name")


def reads_cost(source: str) -> bool:
    """Whether the policy may read the plan's cost (`input.cost`, or `input` whole): prices of the
    catalog's hardware types, which not every requester may read (docs/security.md)."""
    return reads_input(source, "cost")


def reads_input(source: str, top: str, but: str = "") -> bool:
    """Whether the policy reads `input.<top>` (other than `input.<top>.<but>`), or `input` whole."""
    code = _code(source)
    if _WHOLE.search(code):
        return True
    for found in _PATH.finditer(code):
        steps = [m.group(1) or m.group(2) for m in _STEP.finditer(found.group(1))]
        if steps[0] == top and (len(steps) == 1 or not but or steps[1] != but):
            return True
    return False
