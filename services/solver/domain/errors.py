"""The one error the solver raises: a request it cannot answer with a layout."""

from __future__ import annotations

from typing import Literal

Kind = Literal["unsolvable", "invalid"]


class SolveError(Exception):
    """`invalid`: the request names something that does not exist or breaks a rule of the
    catalog (unknown service, missing `requires`...). `unsolvable`: the request is well formed
    but no layout satisfies the template's constraints. The message says which constraint,
    which services and which numbers."""

    def __init__(self, kind: Kind, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind: Kind = kind
        self.message = message


def invalid(message: str) -> SolveError:
    return SolveError("invalid", message)


def unsolvable(message: str) -> SolveError:
    return SolveError("unsolvable", message)
