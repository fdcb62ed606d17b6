"""Size budgets: what one request, one catalog entity or one task result may weigh.

Checked where the thing is admitted (the planner for requests, `muster catalog apply` for
entities, the provisioner for a plugin's result), each with a reason that names the field and
the limit, so nothing oversized ever reaches the log, where it would stay forever. Raising a
limit is always safe; lowering one makes requests accepted under the old limit fail their
re-validation when a planner resumes them (docs/limits.md).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from itertools import accumulate
from typing import Any

MAX_REQUEST_BYTES = 256 * 1024
"""A whole operation request, as sent."""
MAX_CONFIG_BYTES = 64 * 1024
"""A cluster's `config` in a request (the template's defaults are merged into it)."""
MAX_ENTITY_BYTES = 32 * 1024
"""One catalog entity (provider, hardware type, image type, service, template)."""
MAX_RESULT_BYTES = 16 * 1024
"""What one task attempt adds to its node's results (provider id, host keys...)."""
MAX_JSON_DEPTH = 32
"""How deep a request's JSON may nest (arrays and objects inside each other): a config of
nested maps fits with room to spare. Checked before parsing: Python's parser gives up with a
RecursionError near 1,000 levels, and so would everything that walks the value afterwards."""

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_depth(text: str) -> int:
    """How deep the arrays and objects of a JSON text nest, without parsing it (no recursion:
    strings are cut out, then the brackets are counted). A malformed text gives a number that
    the parser's own error will make moot."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


class NotJson(ValueError):
    """A text Python's parser would take (or give up on with an error of its own) that strict
    JSON refuses, said in words: `deep` when it nests too deep (valid JSON, over the limit)."""

    def __init__(self, reason: str, *, deep: bool = False) -> None:
        super().__init__(reason)
        self.deep = deep

    def said(self) -> str:
        """The reason after the thing it is about (`config ...`, `request body ...`)."""
        return str(self) if self.deep else f"is not valid JSON: {self}"


def strict_json(text: str) -> Any:
    """`text` parsed as RFC 8259 JSON, bounded, for whatever comes from outside (a request on
    the bus, an HTTP body, a form's field). Python's parser also takes NaN, Infinity and numbers
    too large for a float (inf), which pydantic then writes to the log as null; it gives up with a
    RecursionError on deep nesting and a bare ValueError on an integer of more than 4,300 digits.
    Raises json.JSONDecodeError for a syntax error and NotJson (both ValueErrors) for the rest."""
    depth = json_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise NotJson(f"nests {depth:,} levels deep; the limit is {MAX_JSON_DEPTH}", deep=True)
    try:
        return json.loads(text, parse_constant=_constant, parse_float=_float, parse_int=_int)
    except NotJson as err:
        where = _not_finite_at(text)
        raise NotJson(f"{err}, at {where}" if where else str(err)) from None


def not_strict_json(data: bytes) -> str | None:
    """Why a body pydantic is about to parse is not strict JSON (`is not valid JSON: NaN is not a
    JSON number ..., at config.a`), or None: pydantic's JSON parser also takes NaN, Infinity and
    1e999 (inf), and its own words say the rest (a syntax error, a bad encoding). For the bus's
    request bodies that go to pydantic whole (governance, catalog, pool, auth requests)."""
    try:
        strict_json(data.decode("utf-8"))
    except NotJson as err:
        return err.said()
    except UnicodeDecodeError as err:  # (pydantic said "Invalid JSON: expected value at line 1 column 1")
        return f"is not UTF-8 JSON: byte {err.start} ({data[err.start:err.start + 1]!r}) is not UTF-8"
    except ValueError:  # (JSONDecodeError: pydantic names it)
        return None
    return None


def _not_finite_at(text: str) -> str | None:
    """Where the first NaN or infinite number is (`nodes`, `config.a.0`), so that the reason
    names the field as a validation error would. Only after strict parsing failed, on a text
    whose depth is bounded."""
    try:
        value = json.loads(text)
    except ValueError:
        return None

    def walk(node: Any, path: tuple[str, ...]) -> tuple[str, ...] | None:
        if isinstance(node, float) and not math.isfinite(node):
            return path
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, inner in items:
            if (found := walk(inner, (*path, str(key)))) is not None:
                return found
        return None

    return ".".join(walk(value, ()) or ()) or None


_MAX_DIGITS = 4300  # Python's own limit for int(str) (sys.get_int_max_str_digits' default)


def _constant(name: str) -> Any:
    raise NotJson(f"{name} is not a JSON number (JSON has no NaN or Infinity)")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotJson(f"{text[:20]} is too large a number (a JSON number here is finite)")
    return value


def _int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > _MAX_DIGITS:
        raise NotJson(f"a number of {digits:,} digits; at most {_MAX_DIGITS:,}")
    return int(text)


def json_size(value: Any) -> int:
    """Bytes of `value` as compact JSON (how it travels and is stored)."""
    return len(json.dumps(value, separators=(",", ":"), default=str).encode())


def over_budget(what: str, size: int, limit: int) -> str:
    return f"{what} is {size:,} bytes; the limit is {limit:,} bytes"


def check_size(what: str, value: Any, limit: int) -> str | None:
    """The reason `value` is refused, or None if it fits."""
    size = json_size(value)
    return over_budget(what, size, limit) if size > limit else None


def max_json_bytes(limit: int) -> Callable[[Any], Any]:
    """A pydantic after-validator: the field's JSON must fit in `limit` bytes (the error
    names the field through its location)."""

    def check(value: Any) -> Any:
        size = json_size(value)
        if size > limit:
            raise ValueError(over_budget("value", size, limit))
        return value

    return check
