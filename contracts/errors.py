"""How a message that fails its contract reads to a person: one sentence naming each field."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

_PYDANTIC_PREFIXES = ("Value error, ", "Assertion failed, ")


def problem_text(problem: Any) -> str:
    """A problem's sentence without pydantic's "Value error, " before our own validators' words."""
    msg = str(problem["msg"])
    for prefix in _PYDANTIC_PREFIXES:
        msg = msg.removeprefix(prefix)
    return msg


def describe_validation_error(err: ValidationError) -> str:
    """One part per problem, each naming the field by its dotted path."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(document)"
        parts.append(f"{loc}: {problem_text(e)}")
    return "; ".join(parts)
