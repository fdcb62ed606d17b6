"""How a message that fails its contract reads to a person: one sentence naming each field."""

from __future__ import annotations

from pydantic import ValidationError


def describe_validation_error(err: ValidationError) -> str:
    """One part per problem, each naming the field by its dotted path."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(document)"
        parts.append(f"{loc}: {e['msg']}")
    return "; ".join(parts)
