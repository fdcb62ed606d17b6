"""How a message that fails its contract reads to a person: one sentence naming each field."""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

_PYDANTIC_PREFIXES = ("Value error, ", "Assertion failed, ")

_WORD_CHARS = "letters, digits, '-' and '_'"
_BOUNDED_WORD = re.compile(r"\^\[A-Za-z0-9_\\-\]\{(\d+),(\d+)\}\$")
_PATTERNS = {
    r"^[A-Za-z0-9_][A-Za-z0-9_\-]*$": f"use {_WORD_CHARS}, not starting with '-'",
    r"^\d+(\.\d+)?%$": "give a whole number or a percentage such as '25%'",
    r"^[A-Za-z0-9.\-:%\[\]]{1,253}$": "give a host name or an IP address (letters, digits, '.', '-', ':', '%', '[' and ']')",
    r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$": "use up to 128 letters, digits, '_', '.', ':' and '-', starting with a letter or digit",
    r"^[A-Za-z0-9_.:/=\-]{1,64}$": "use up to 64 letters, digits, '_', '.', ':', '/', '=' and '-' (no spaces)",
    r"^[a-z_][a-z0-9_\-]{0,31}$": "give a login name: up to 32 lower-case letters, digits, '_' and '-', not starting with a digit",
    r"^[A-Za-z0-9_\-.]+$": "give a NATS subject: letters, digits, '_', '-' and '.' (no wildcards, no spaces)",
    r"^[A-Za-z0-9_\-]+$": f"use {_WORD_CHARS}",
    r"^[a-z][a-z\-]{1,31}$": "give an operation's verb (check, restart, extend-lease, ...): lower-case letters and '-'",
    r"^https?://[^\s@]+$": "give an http:// or https:// URL, without spaces or credentials (user@)",
    r"^(https?|secret)://": "give an http:// or https:// URL, or secret://NAME for one in the notifier's secrets file",
    r"^muster\.cb\.[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)+$": "give a subject under muster.cb.<your tenant>. (e.g. muster.cb.acme.alerts)",
}
"""Patterns of the contracts in words: a person is not asked to read a regular expression."""
_URL_PATTERNS = frozenset({r"^https?://[^\s@]+$", r"^(https?|secret)://"})
"""Patterns of URLs: a value refused by one is not shown in the answer."""
_OBJECTS = {"Rolling": '{"batch": 2, "tolerance": 0} (a batch of nodes, or a percentage such as "25%")'}
"""An example of each object a person is likeliest to write as a bare value (`"rolling": 2`, as
`--rolling 2` reads): pydantic said "a valid dictionary or instance of Rolling"."""


_BOUNDS = {"less_than_equal": ("le", "over the limit: at most"), "greater_than_equal": ("ge", "under the limit: at least"),
           "less_than": ("lt", "over the limit: less than"), "greater_than": ("gt", "under the limit: more than")}
"""A number out of its range, said with the range: `nodes: 20000 is over the limit: at most 10000`
(it read "Input should be less than or equal to 10000")."""


_ONE_CLASS = re.compile(r"\^\[([^\]]+)\](?:\{(\d+),(\d+)\}|\+)\$")


def char_shown(ch: str) -> str:
    """One character as a person can tell it apart: `'/'`, or its code point and name when it is
    not printable ASCII (`U+0435 CYRILLIC SMALL LETTER IE`, which prints as a Latin `e`)."""
    if " " < ch < "\x7f":
        return repr(ch)
    name = unicodedata.name(ch, "") or ("(a control character)" if unicodedata.category(ch) == "Cc" else "")
    return f"U+{ord(ch):04X}" + (f" {name}" if name else "")


def name_fault(value: str, pattern: str) -> str:
    """What in `value` a one-class pattern (`^[A-Za-z0-9_\\-]{1,64}$`) refuses: `character 2 is
    U+0435 CYRILLIC SMALL LETTER IE`, `it is 1000 characters long`, `it is empty`; '' for another
    pattern. A refusal quoting `'wеb'` or `'a\\u200db'` alone left its reader to find the fault
    (session 37's walk: a homoglyph reads as the name it imitates)."""
    found = _ONE_CLASS.fullmatch(pattern)
    if found is None:
        return ""
    allowed = re.compile(f"[{found.group(1)}]")
    for at, ch in enumerate(value, 1):
        if not allowed.fullmatch(ch):
            return f"character {at} is {char_shown(ch)}"
    if not value:
        return "it is empty"
    most = int(found.group(3)) if found.group(3) else None
    return f"it is {len(value)} characters long" if most is not None and len(value) > most else ""


def _pattern_words(pattern: str) -> str | None:
    bounded = _BOUNDED_WORD.fullmatch(pattern)
    if bounded:
        return f"use {bounded.group(1)} to {bounded.group(2)} {_WORD_CHARS}"
    return _PATTERNS.get(pattern)


def problem_text(problem: Any) -> str:
    """A problem's sentence without pydantic's "Value error, " before our own validators' words,
    and a name that does not fit its pattern said in words."""
    if problem.get("type") == "string_pattern_mismatch":
        pattern = str((problem.get("ctx") or {}).get("pattern", ""))
        words = _pattern_words(pattern)
        if words is not None and pattern in _URL_PATTERNS:
            # Not repeated: a refused URL may hold a credential (`https://user:pw@...`).
            return f"the URL is not allowed here: {words}"
        if words is not None:
            shown = str(problem.get("input", ""))
            fault = name_fault(shown, str((problem.get("ctx") or {}).get("pattern", "")))
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
            return f"{shown!r} is not allowed here: {words}" + (f" ({fault})" if fault else "")
    if problem.get("type") == "string_too_short" and (problem.get("ctx") or {}).get("min_length") == 1:
        return "is empty: give a value"  # (an empty policy file read "String should have at least 1 character")
    if problem.get("type") == "model_type":
        name = str((problem.get("ctx") or {}).get("class_name", ""))
        example = _OBJECTS.get(name)
        shown = repr(problem.get("input"))
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        return f"{shown} is not an object: give one" + (f", e.g. {example}" if example else f" (a {name})")
    if problem.get("type") in ("datetime_parsing", "datetime_from_date_parsing", "datetime_type"):
        # (it said "Input should be a valid datetime or date, input is too short" of 'tomorrow')
        return f"{str(problem.get('input'))[:40]!r} is not a time: give one in ISO 8601 with its time zone, e.g. '2030-01-01T09:00:00Z'"
    mistyped = _type_text(problem)
    if mistyped is not None:
        return mistyped
    limited = _limit_text(problem)  # (a limit of our own, named, before any number's range)
    if limited is not None:
        return limited
    bound = _BOUNDS.get(str(problem.get("type")))
    if bound is not None:
        key, words = bound
        return f"{problem.get('input')!s:.40} is {words} {(problem.get('ctx') or {}).get(key)}"
    msg = str(problem["msg"])
    for prefix in _PYDANTIC_PREFIXES:
        msg = msg.removeprefix(prefix)
    return msg


_WANTED = {"int_type": "a whole number", "int_from_float": "a whole number", "float_type": "a number",
           "bool_type": "true or false", "string_type": "text in quotes", "list_type": "an array", "dict_type": "an object"}
"""What a field of each type takes, said in JSON's words: a strict body (HTTP) said "Input should
be a valid integer" of `"nodes": "3"`, without saying that the quotes were the fault."""
JSON_TYPE_ERRORS = frozenset(_WANTED)
"""pydantic's errors of a value of another JSON type than its field's (strict mode's own: lax
mode reads "3" as 3)."""
_WANTED |= {"int_parsing": "a whole number", "float_parsing": "a number", "bool_parsing": "true or false"}


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, str):
        return "text"
    if isinstance(value, (int, float)):
        return "a number"
    return "an array" if isinstance(value, (list, tuple)) else "an object"


def _type_text(problem: Any) -> str | None:
    """A value of the wrong JSON type, said with what the field takes: `'3' is text: give a whole
    number, without quotes`."""
    wanted = _WANTED.get(str(problem.get("type")))
    if wanted is None:
        return None
    given = problem.get("input")
    if given is None:
        return f"is null: give {wanted}"
    shown = repr(given) if isinstance(given, str) else json.dumps(given, default=str)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    if isinstance(given, float) and wanted == "a whole number":
        return f"{shown} is not a whole number"
    unquoted = isinstance(given, str) and wanted not in ("text in quotes", "an array", "an object") and _reads_as(given, wanted)
    example = f", e.g. [{json.dumps(given[:40])}]" if wanted == "an array" and isinstance(given, str) else ""
    return f"{shown} is {_json_kind(given)}: give {wanted}" + (", without quotes" if unquoted else example)


def _reads_as(text: str, wanted: str) -> bool:
    if wanted == "true or false":
        return text.strip().lower() in ("true", "false")
    try:
        number = float(text)
    except ValueError:
        return False
    return wanted == "a number" or number.is_integer()


def too_long_text(length: int, limit: int) -> str:
    """A text past its limit: its length and the limit (the console says it of a form's field too)."""
    return f"{length:,} characters given; at most {limit:,}"


def _limit_text(problem: Any) -> str | None:
    """A bound passed, in our words: the limit and what was given (pydantic said "String should
    have at most 2000 characters" of a 2,345-character comment, naming neither its length nor
    whose limit it is)."""
    kind, ctx, given = problem.get("type"), problem.get("ctx") or {}, problem.get("input")
    if kind == "string_too_long" and isinstance(given, str):
        return too_long_text(len(given), int(ctx.get("max_length", 0)))
    if kind == "less_than_equal" and isinstance(given, int) and not isinstance(given, bool):
        from .commands import MAX_CLUSTER_SIZE, too_many_nodes

        loc = problem.get("loc") or ()
        if loc and loc[-1] == "nodes" and ctx.get("le") == MAX_CLUSTER_SIZE:
            return too_many_nodes(f"{given:,}")
    return None


def describe_validation_error(err: ValidationError) -> str:
    """One part per problem, each naming the field by its dotted path."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])  # none: a rule between fields, said alone
        parts.append(f"{loc}: {problem_text(e)}" if loc else problem_text(e))
    return "; ".join(parts)


def typed_strictly(validate: Callable[[bool], Any]) -> Any:
    """`validate(strict=False)`'s value, refused for the values strict mode finds of another JSON
    type than their field's (JSON_TYPE_ERRORS) only: strict mode also refuses a date for a
    time and other strings lax mode reads well. Refused by lax mode too (a field missing), the
    refusal has both (every problem at once)."""
    lax: ValidationError | None = None
    try:
        value = validate(False)
    except ValidationError as err:
        lax = err
    try:
        validate(True)
        wrong: list[Any] = []
    except ValidationError as strict:
        wrong = [_detail(e) for e in strict.errors() if e["type"] in JSON_TYPE_ERRORS]
    if lax is None:
        if not wrong:
            return value
        raise ValidationError.from_exception_data("body", wrong)
    said = {tuple(e["loc"]) for e in lax.errors()}
    more = [e for e in wrong if tuple(e["loc"]) not in said]
    if not more:
        raise lax
    try:
        combined = ValidationError.from_exception_data("body", [_detail(e) for e in lax.errors()] + more)
    except (TypeError, ValueError, KeyError):  # (an error pydantic cannot rebuild: lax mode's own words)
        raise lax from None
    raise combined


def _detail(error: Any) -> Any:
    return {"type": error["type"], "loc": error["loc"], "input": error["input"], **({"ctx": error["ctx"]} if "ctx" in error else {})}
