"""What reaches the planner as a request, and what it answers: the request's context, the
answers an operation gets, and the parsing of a request's body into its command."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from contracts.commands import COMMAND_ADAPTER, VERB_OF, Accepted, DryRun, LeaseExtended, Rejected
from contracts.errors import describe_validation_error, typed_strictly
from contracts.limits import MAX_REQUEST_BYTES, NotJson, json_size, over_budget, strict_json
from contracts.secrets import refused as refused_secrets
from contracts.secrets import secrets_in_clear

from .domain.admission import Refused

COMMAND_OF_VERB = {verb: command for command, verb in VERB_OF.items()}

OperationAnswer = Accepted | Rejected | DryRun | LeaseExtended
"""Every operation request gets exactly one of these."""


@dataclass(frozen=True)
class RequestContext:
    """One request as it reached the planner."""

    tenant: str
    verb: str
    body: bytes
    principal: str | None = None
    """The authenticated caller, when the transport knows one; it becomes the events' `by`."""

    def by(self, command: Any) -> str:
        return self.principal or str(command.requested_by)


def parse(verb: str, data: bytes) -> Any:
    """The command a request's body holds, or `Refused` naming what is wrong with it."""
    try:
        # As UTF-8, always: json.loads(bytes) guesses UTF-16/32 from NUL bytes and then blames a codec.
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise Refused(f"request body is not UTF-8 JSON: byte {err.start} ({data[err.start:err.start + 1]!r}) is not UTF-8") from None
    try:
        body = strict_json(text)
    except NotJson as err:
        raise Refused(f"request body {err.said()}") from None
    except json.JSONDecodeError as err:
        raise Refused(f"request body is not UTF-8 JSON: {err}") from None
    if not isinstance(body, dict):
        raise Refused("request body must be a JSON object")
    in_clear = secrets_in_clear(body)
    if in_clear:  # before anything else reads it: no answer, log line or event may echo it
        raise Refused(refused_secrets(in_clear, "the request"))
    if len(data) > MAX_REQUEST_BYTES:  # after parsing: the reason can name the field to blame
        biggest = max(body, key=lambda k: json_size(body[k]), default="")
        raise Refused(f"request {over_budget('body', len(data), MAX_REQUEST_BYTES)}"
                      + (f" (field {biggest!r} alone is {json_size(body[biggest]):,} bytes)" if biggest else ""))
    expected = COMMAND_OF_VERB.get(verb)
    if expected is None:
        raise Refused(f"unknown operation {verb!r}; known: {', '.join(sorted(VERB_OF.values()))}")
    body.setdefault("type", expected)
    if body["type"] != expected:
        raise Refused(f"operation {verb!r} takes a {expected} command, not {body['type']!r}")
    typed = json.dumps(body)
    try:
        # JSON's types as the tracker's write routes take them: `"nodes": "3"` was read as 3 on
        # the bus and refused over HTTP (`'3' is text: give a whole number, without quotes`).
        return typed_strictly(lambda strict: COMMAND_ADAPTER.validate_json(typed, strict=strict))
    except ValidationError as err:
        where = err.errors()[0]["loc"] if err.errors() else ()
        raise Refused(f"invalid {expected}: {describe_validation_error(err)}", code="invalid",
                      field=".".join(str(p) for p in where[1:] if p != expected) or None) from None
