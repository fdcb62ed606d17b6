"""What the catalog knows about plugins: a registry of their specs (`PluginSpecs`), given to it
by whoever composes the catalog with the provisioner's descriptors
(`services.provisioner.plugins.specs.catalog_plugins`).

The catalog imports no plugin code and no service: the specs say which fields a plugin takes, which
are required or sensitive, and how to check a value."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class PluginField:
    sensitive: bool = False
    required: bool = False
    check: Callable[[Any], object] | None = None
    """Parses a value; raises ValueError with a message naming what is wrong."""


@dataclass(frozen=True)
class PluginSpec:
    """What validation needs of a plugin descriptor (`plugin.json`)."""

    name: str
    type: Literal["provider", "automator"]
    fields: Mapping[str, PluginField] = field(default_factory=dict)


class PluginSpecs:
    """The registry of plugins the catalog is checked against."""

    def __init__(self, specs: Iterable[PluginSpec] = ()) -> None:
        self.specs = tuple(specs)
        self.providers: dict[str, PluginSpec] = {p.name: p for p in self.specs if p.type == "provider"}
        self.automators: dict[str, PluginSpec] = {p.name: p for p in self.specs if p.type == "automator"}

    def __iter__(self) -> Iterator[PluginSpec]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)
