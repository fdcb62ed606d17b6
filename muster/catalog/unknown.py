"""Keys of a catalog file that no field of its entity reads (pure).

The contracts ignore unknown keys so that a Coopr export never fails on a field muster does not
use (contracts/catalog.py); but a typo (`requirez`, `quantity`) then vanishes without a word and
the entity is applied without what the author meant. So every such key is reported as a
warning, naming its field and the closest real one: it does not block, and a Coopr catalog
(whose fields are all modelled) reads without any.
"""

from __future__ import annotations

import difflib
from enum import Enum
from typing import Any

from pydantic import BaseModel

IGNORED = frozenset({"kind"})
"""Top-level keys that are not fields but are read by the loader (a YAML document's kind)."""
LEGACY = frozenset({"stepSize"})
"""Coopr fields it removed itself (coopr-facts §1.6: `quantities.stepSize`); old exports still have them."""


def unknown_fields(entity: BaseModel, raw: Any) -> list[tuple[str, str]]:
    """(dotted field, message) for every key of `raw` that `entity` (parsed from it) does not read."""
    if not isinstance(raw, dict):
        return []
    return _of_model(entity, {k: v for k, v in raw.items() if k not in IGNORED}, "")


def _of_model(model: BaseModel, raw: dict[Any, Any], prefix: str) -> list[tuple[str, str]]:
    names: dict[str, str] = {}
    for name, info in type(model).model_fields.items():
        names[name] = name
        if info.alias:
            names[info.alias] = name
    out: list[tuple[str, str]] = []
    for key, value in raw.items():
        field = names.get(str(key))
        if field is None:
            if str(key) not in LEGACY:
                out.append((f"{prefix}{key}", _message(str(key), sorted(type(model).model_fields))))
            continue
        out += _of_value(getattr(model, field), value, f"{prefix}{key}.")
    return out


def _of_value(parsed: Any, raw: Any, prefix: str) -> list[tuple[str, str]]:
    if isinstance(parsed, BaseModel) and isinstance(raw, dict):
        return _of_model(parsed, raw, prefix)
    if isinstance(parsed, dict) and isinstance(raw, dict):
        by_text = {(k.value if isinstance(k, Enum) else str(k)): v for k, v in parsed.items()}
        return [p for k, v in raw.items() if str(k) in by_text for p in _of_value(by_text[str(k)], v, f"{prefix}{k}.")]
    if isinstance(parsed, list) and isinstance(raw, list) and len(parsed) == len(raw):
        return [p for i, (a, b) in enumerate(zip(parsed, raw, strict=True)) for p in _of_value(a, b, f"{prefix[:-1]}[{i}].")]
    return []


def _message(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}?" if close else f"the fields here are {', '.join(repr(k) for k in known)}"
    return f"unknown field {key!r}, ignored: {hint}"
