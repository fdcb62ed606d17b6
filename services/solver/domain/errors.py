"""The one error the solver raises: a request it cannot answer with a layout."""

from __future__ import annotations

from typing import Literal

Kind = Literal["unsolvable", "invalid"]


class SolveError(Exception):
    """`invalid`: the request names something that does not exist or breaks a rule of the
    catalog (unknown service, missing `requires`...). `unsolvable`: the request is well formed
    but no layout satisfies the template's constraints. The message says which constraint,
    which services and which numbers. `fields`: the request's fields (`LayoutRequested`'s:
    services, add_services, remove_services) it is about, when it is about some: a form shows
    it there."""

    def __init__(self, kind: Kind, message: str, fields: tuple[str, ...] = ()) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind: Kind = kind
        self.message = message
        self.fields = fields


def invalid(message: str, *fields: str) -> SolveError:
    return SolveError("invalid", message, fields)


def unsolvable(message: str) -> SolveError:
    return SolveError("unsolvable", message)
