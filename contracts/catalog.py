"""Catalog entities in Coopr's JSON format (docs/client.md, "Catalog administration").

Coopr's own catalogs (providers/, hardwaretypes/, imagetypes/, services/, clustertemplates/)
load as they are: unknown keys are ignored so that a Coopr export never fails on a field we do
not use, but every field we *do* use is type-checked and a bad value names its field.
Where Coopr would crash (a service constraint without `quantities`) we use Coopr's defaults.
"""

from __future__ import annotations

import json
import math
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_\-]*$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, defer_build=True)


class Action(str, Enum):
    """Node-level task actions, in Coopr's `ProvisionerAction` order."""

    CREATE = "create"
    CONFIRM = "confirm"
    BOOTSTRAP = "bootstrap"
    INSTALL = "install"
    REMOVE = "remove"
    INITIALIZE = "initialize"
    CONFIGURE = "configure"
    START = "start"
    STOP = "stop"
    DELETE = "delete"
    STATUS = "status"
    """muster's: reports the service's state on the node (running, stopped, failed, unknown)."""


HARDWARE_ACTIONS = frozenset({Action.CREATE, Action.CONFIRM, Action.BOOTSTRAP, Action.DELETE})
SERVICE_ACTIONS = frozenset(Action) - HARDWARE_ACTIONS


class Entity(_Model):
    name: str = Field(pattern=NAME_PATTERN, max_length=128)
    label: str | None = None
    description: str = ""
    icon: str | None = None
    version: int = 1


PROVISIONER_CLASS = r"^[A-Za-z0-9_\-]{1,128}$"


class Provider(Entity):
    providertype: str = Field(min_length=1)
    provisionerclass: str | None = Field(
        default=None, pattern=PROVISIONER_CLASS,
        description="the class of provisioners that carry out this provider's clusters' tasks (default: the planner's)")
    maxconcurrent: int | None = Field(
        default=None, ge=1,
        description="this provider's own tasks (create, confirm, delete) in flight at once across the tenant's jobs "
        "(its API's limit; default: no limit)")
    # The provider plugin's field values (URL, user, credentials...). Which of them are
    # sensitive is declared by the plugin's descriptor, not here.
    provisioner: dict[str, Any] = Field(default_factory=dict)


def _text(value: Any) -> str:
    """A field value as text: numbers as Coopr writes them, maps and lists as JSON (so that
    what is inside them stays readable, to a plugin and to the secrets check)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def _stringify_map(value: Any) -> Any:
    # Coopr writes some provider-map values as numbers ("cost": 0.175); the solver compares
    # them as text, so we keep text.
    if isinstance(value, dict):
        return {
            provider: (
                {k: _text(v) for k, v in fields.items()}
                if isinstance(fields, dict)
                else fields
            )
            for provider, fields in value.items()
        }
    return value


class HardwareType(Entity):
    providermap: dict[str, dict[str, str]] = Field(default_factory=dict)

    _stringify = field_validator("providermap", mode="before")(lambda cls, v: _stringify_map(v))

    def flavor(self, provider: str) -> str | None:
        return self.providermap.get(provider, {}).get("flavor")

    def cost(self, provider: str) -> float | None:
        """The price of one node an hour; None when there is none, or none that reads as a
        price (`$0.05`, `nan`, `-1`): previews list it as unknown and the solver's comparator
        does not rank by it, rather than show NaN or prefer a "negative" machine."""
        return price(self.providermap.get(provider, {}).get("cost"))


def price(raw: str | None) -> float | None:
    """A cost field as a number of at least 0, or None."""
    try:
        value = float(raw) if raw is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) and value >= 0 else None


class ImageType(Entity):
    providermap: dict[str, dict[str, str]] = Field(default_factory=dict)

    _stringify = field_validator("providermap", mode="before")(lambda cls, v: _stringify_map(v))

    def image(self, provider: str) -> str | None:
        return self.providermap.get(provider, {}).get("image")


class StageDependencies(_Model):
    requires: list[str] = Field(default_factory=list)
    uses: list[str] = Field(default_factory=list)


class ServiceDependencies(_Model):
    provides: list[str] = Field(default_factory=list)
    conflicts: list[str] = Field(default_factory=list)
    install: StageDependencies = Field(default_factory=StageDependencies)
    runtime: StageDependencies = Field(default_factory=StageDependencies)

    @property
    def requires(self) -> set[str]:
        return set(self.install.requires) | set(self.runtime.requires)


class ServiceAction(_Model):
    type: str = Field(min_length=1, description="automator plugin type, e.g. 'shell'")
    fields: dict[str, str] = Field(default_factory=dict)

    @field_validator("fields", mode="before")
    @classmethod
    def _text_fields(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: _text(v) for k, v in value.items()}
        return value


class ServiceProvisioner(_Model):
    actions: dict[Action, ServiceAction] = Field(default_factory=dict)

    @field_validator("actions")
    @classmethod
    def _only_service_actions(cls, value: dict[Action, ServiceAction]) -> dict[Action, ServiceAction]:
        hardware = sorted(a.value for a in value if a in HARDWARE_ACTIONS and a is not Action.BOOTSTRAP)
        if hardware:
            raise ValueError(f"actions {hardware} are machine actions run by the provider, not a service")
        return value


class Link(_Model):
    label: str = ""
    url: str


class Service(Entity):
    dependencies: ServiceDependencies = Field(default_factory=ServiceDependencies)
    provisioner: ServiceProvisioner = Field(default_factory=ServiceProvisioner)
    links: list[Link] = Field(default_factory=list)

    def has_action(self, action: Action) -> bool:
        return action in self.provisioner.actions


# ---------------------------------------------------------------------------- templates


class NameRef(_Model):
    name: str


class ServiceDefault(_Model):
    name: str
    config: dict[str, Any] = Field(default_factory=dict)


class TemplateDefaults(_Model):
    services: list[str] = Field(default_factory=list)
    provider: str | None = None
    hardwaretype: str | None = None
    imagetype: str | None = None
    dnsSuffix: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    provisionerclass: str | None = Field(
        default=None, pattern=PROVISIONER_CLASS,
        description="the class of provisioners that carry out the clusters' tasks; wins over the provider's")

    @model_validator(mode="before")
    @classmethod
    def _fold_service_objects(cls, data: Any) -> Any:
        # Coopr allows `{"name": s, "config": {...}}` in the services list; the config is
        # folded into config[s].
        if not isinstance(data, dict) or not isinstance(data.get("services"), list):
            return data
        data = dict(data)
        names: list[Any] = []
        config = dict(data.get("config") or {})
        for item in data["services"]:
            if isinstance(item, dict):
                parsed = ServiceDefault.model_validate(item)
                names.append(parsed.name)
                if parsed.config:
                    config[parsed.name] = parsed.config
            else:
                names.append(item)
        data["services"], data["config"] = names, config
        return data


class Compatibility(_Model):
    """An empty list allows everything (Coopr's `Compatibilities`)."""

    hardwaretypes: list[str] = Field(default_factory=list)
    imagetypes: list[str] = Field(default_factory=list)
    services: list[str] = Field(default_factory=list)

    def allows_hardware(self, name: str) -> bool:
        return not self.hardwaretypes or name in self.hardwaretypes

    def allows_image(self, name: str) -> bool:
        return not self.imagetypes or name in self.imagetypes

    def allows_service(self, name: str) -> bool:
        return not self.services or name in self.services


class Ratio(_Model):
    """Share of the cluster's nodes a service may occupy, in percent (muster extension).

    JSON: `"quantities": {"ratio": {"min": 10, "max": 50}}` = the service runs on at least 10%
    and at most 50% of the cluster's nodes; the bounds are rounded inwards (ceil for min, floor
    for max), so a percentage is never exceeded.
    """

    min: float | None = Field(default=None, ge=0, le=100)
    max: float | None = Field(default=None, ge=0, le=100)

    @model_validator(mode="after")
    def _ordered(self) -> Ratio:
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"ratio min {self.min} is greater than ratio max {self.max}")
        return self


class Quantities(_Model):
    min: int = Field(default=0, ge=0)
    max: int | None = Field(default=None, ge=0, description="absent = unlimited")
    ratio: Ratio | None = None

    @field_validator("ratio", mode="before")
    @classmethod
    def _drop_legacy_ratio(cls, value: Any) -> Any:
        # Coopr once wrote ratio as an "a:b" string, then removed it; such files still exist.
        return None if isinstance(value, str) else value

    @model_validator(mode="after")
    def _ordered(self) -> Quantities:
        if self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is greater than max {self.max}")
        return self


class ServiceConstraint(_Model):
    hardwaretypes: list[str] = Field(default_factory=list)
    imagetypes: list[str] = Field(default_factory=list)
    quantities: Quantities = Field(default_factory=Quantities)


class LayoutConstraint(_Model):
    mustcoexist: list[list[str]] = Field(default_factory=list)
    cantcoexist: list[list[str]] = Field(default_factory=list)


class SizeConstraint(_Model):
    min: int = Field(default=1, ge=1)
    max: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> SizeConstraint:
        if self.max is not None and self.min > self.max:
            raise ValueError(f"size min {self.min} is greater than size max {self.max}")
        return self

    def allows(self, nodes: int) -> bool:
        return self.min <= nodes and (self.max is None or nodes <= self.max)

    @property
    def range_text(self) -> str:
        return f"{self.min} to {self.max}" if self.max is not None else f"at least {self.min}"

    def refusal(self, template: str, nodes: int) -> str:
        """The one sentence for a size the template does not allow, whichever request asked
        (create, expand, shrink; planner or solver): the limit and where it comes from."""
        return f"template {template!r} allows {self.range_text} nodes (its size constraint); {nodes} requested"

    def allows_change(self, current: int, nodes: int) -> bool:
        """A cluster of `current` nodes may become one of `nodes`: within the range, or, for a
        cluster already outside it (the template changed after it was made), any step toward the
        range that does not pass it, and a change that keeps its size. Refusing every step but
        the one straight into the range would leave a cluster of 10 under a max of 3 no way to
        shrink one node at a time."""
        if self.allows(nodes) or nodes == current:
            return True
        if self.max is not None and current > self.max:
            return self.max < nodes < current
        return current < self.min and current < nodes < self.min


class Constraints(_Model):
    layout: LayoutConstraint = Field(default_factory=LayoutConstraint)
    services: dict[str, ServiceConstraint] = Field(default_factory=dict)
    size: SizeConstraint = Field(default_factory=SizeConstraint)


class ClusterTemplate(Entity):
    defaults: TemplateDefaults = Field(default_factory=TemplateDefaults)
    compatibility: Compatibility = Field(default_factory=Compatibility)
    constraints: Constraints = Field(default_factory=Constraints)
    administration: dict[str, Any] = Field(default_factory=dict)
    links: list[Link] = Field(default_factory=list)
    extends: NameRef | None = None
    includes: list[NameRef] = Field(default_factory=list)
    # Only partial templates use this: their config cannot be overridden by an includer.
    immutable: bool = False


# ---------------------------------------------------------------------------- the catalog

KINDS: dict[str, type[Entity]] = {
    "providers": Provider,
    "hardwaretypes": HardwareType,
    "imagetypes": ImageType,
    "services": Service,
    "clustertemplates": ClusterTemplate,
    "partialtemplates": ClusterTemplate,
}


class Catalog(_Model):
    """One tenant's catalog: every entity by kind and name."""

    providers: dict[str, Provider] = Field(default_factory=dict)
    hardwaretypes: dict[str, HardwareType] = Field(default_factory=dict)
    imagetypes: dict[str, ImageType] = Field(default_factory=dict)
    services: dict[str, Service] = Field(default_factory=dict)
    clustertemplates: dict[str, ClusterTemplate] = Field(default_factory=dict)
    partialtemplates: dict[str, ClusterTemplate] = Field(default_factory=dict)

    def entities(self, kind: str) -> dict[str, Any]:
        if kind not in KINDS:
            raise KeyError(f"unknown catalog kind {kind!r}; kinds are {sorted(KINDS)}")
        return getattr(self, kind)  # type: ignore[no-any-return]
