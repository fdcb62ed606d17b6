"""Size budgets: what one request, one catalog entity or one task result may weigh.

Checked where the thing is admitted (the planner for requests, `muster catalog apply` for
entities, the provisioner for a plugin's result), each with a reason that names the field and
the limit, so nothing oversized ever reaches the log, where it would stay forever. Raising a
limit is always safe; lowering one makes requests accepted under the old limit fail their
re-validation when a planner resumes them (docs/limits.md).
"""

from __future__ import annotations

import json
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
