"""A problem found in a catalog: which entity, which field, what is wrong, how bad; the file
it came from is added by whoever read the file."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning"]

KIND_LABEL = {
    "providers": "provider",
    "hardwaretypes": "hardware type",
    "imagetypes": "image type",
    "services": "service",
    "clustertemplates": "cluster template",
    "partialtemplates": "partial template",
}


@dataclass(frozen=True)
class Problem:
    kind: str
    name: str
    field: str
    message: str
    severity: Severity = "error"
    source: str = ""

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def key(self) -> tuple[str, str, str, str]:
        """Identity of a problem regardless of where the entity was read from."""
        return (self.kind, self.name, self.field, self.message)

    def __str__(self) -> str:
        where = [x for x in (self.source, f"{KIND_LABEL.get(self.kind, self.kind)} {self.name!r}" if self.kind else "") if x]
        text = ": ".join(where)
        if self.field:
            text = f"{text}, field {self.field}" if text else f"field {self.field}"
        return f"{text}: {self.message}" if text else self.message


def quoted(items: Iterable[str]) -> str:
    """'a', 'b', 'c'"""
    return ", ".join(repr(i) for i in items)
