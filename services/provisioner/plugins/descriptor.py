"""Plugin descriptors (`plugin.json`): what a plugin is, what it handles, which fields it takes.

A descriptor is validated with pydantic; every error names the file and the field
(`PluginError: .../plugin.json: field 'fields.region.type': ...`). Field values reach a plugin
as text in Coopr catalogs (`"failure_rate": "0"`), so each field type knows how to read text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from contracts.catalog import HARDWARE_ACTIONS, NAME_PATTERN, Action
from contracts.errors import problem_text

DESCRIPTOR_FILE = "plugin.json"

PROVIDER_ACTIONS = frozenset({Action.CREATE, Action.CONFIRM, Action.DELETE})
AUTOMATOR_ACTIONS = frozenset(Action) - PROVIDER_ACTIONS
assert AUTOMATOR_ACTIONS == (frozenset(Action) - HARDWARE_ACTIONS) | {Action.BOOTSTRAP}


class PluginError(Exception):
    """A plugin could not be loaded (bad descriptor, missing entry point, duplicate name)."""


class PluginType(str, Enum):
    PROVIDER = "provider"
    AUTOMATOR = "automator"


FieldType = Literal["text", "password", "integer", "number", "boolean", "select", "json"]


class FieldSpec(BaseModel):
    """One configuration field (Coopr's FieldSchema, plus `required` per field)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str = Field(min_length=1)
    type: FieldType = "text"
    tip: str = ""
    required: bool = False
    sensitive: bool = False
    default: Any = None
    options: list[str] = Field(default_factory=list, description="allowed values of a select")
    pattern: str | None = Field(default=None, description="a text field's value matches this regular expression whole")

    @model_validator(mode="after")
    def _consistent(self) -> FieldSpec:
        if self.type == "select" and not self.options:
            raise ValueError("a select field needs 'options'")
        if self.type != "select" and self.options:
            raise ValueError("'options' is only for select fields")
        if self.pattern is not None:
            if self.type != "text":
                raise ValueError("'pattern' is only for text fields")
            try:
                re.compile(self.pattern)
            except re.error as err:
                raise ValueError(f"'pattern' is not a regular expression: {err}") from None
        if self.sensitive and self.default is not None:
            raise ValueError("a sensitive field cannot have a default (descriptors are published)")
        if self.required and self.default is not None:
            raise ValueError("a required field cannot have a default")
        if self.default is not None:
            self.parse(self.default)  # a default must be a valid value
        return self

    def parse(self, value: Any) -> Any:
        """Read a value given as JSON or as text (Coopr catalogs write numbers as text)."""
        kind = self.type
        if kind in ("text", "password"):
            if isinstance(value, (dict, list)):
                raise ValueError(f"expected text, got {type(value).__name__}")
            text = value if isinstance(value, str) else str(value)
            # (refused when the catalog is applied: the plugin refused it only when a task ran, permanently)
            if self.pattern is not None and text and not re.fullmatch(self.pattern, text):  # ("": unset)
                raise ValueError(f"{text!r} is not of the form {self.pattern} ({self.tip or self.label})")
            return text
        if kind == "integer":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(f"expected an integer, got {value!r}")
            try:
                return int(str(value).strip()) if isinstance(value, str) else int(value)
            except (TypeError, ValueError):
                raise ValueError(f"expected an integer, got {value!r}") from None
        if kind == "number":
            if isinstance(value, bool):
                raise ValueError(f"expected a number, got {value!r}")
            try:
                return float(value)
            except (TypeError, ValueError):
                raise ValueError(f"expected a number, got {value!r}") from None
        if kind == "boolean":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("true", "yes", "1", "on"):
                return True
            if text in ("false", "no", "0", "off", ""):
                return False
            raise ValueError(f"expected a boolean, got {value!r}")
        if kind == "select":
            text = value if isinstance(value, str) else str(value)
            if text not in self.options:
                raise ValueError(f"expected one of {self.options}, got {text!r}")
            return text
        # json
        if isinstance(value, str):
            try:
                return json.loads(value)
            except json.JSONDecodeError as err:
                raise ValueError(f"expected JSON: {err}") from None
        return value


class PluginDescriptor(BaseModel):
    """The content of a plugin's `plugin.json`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME_PATTERN, max_length=128)
    type: PluginType
    version: str = Field(min_length=1, max_length=64)
    description: str = ""
    actions: list[Action] = Field(min_length=1, description="the task actions this plugin handles")
    entry_point: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
    fields: dict[str, FieldSpec] = Field(default_factory=dict)

    @field_validator("actions")
    @classmethod
    def _actions_fit_type(cls, actions: list[Action], info: ValidationInfo) -> list[Action]:
        kind = info.data.get("type")
        if kind is None:  # 'type' itself is invalid; that error is reported already
            return actions
        allowed = PROVIDER_ACTIONS if kind is PluginType.PROVIDER else AUTOMATOR_ACTIONS
        wrong = sorted(a.value for a in actions if a not in allowed)
        if wrong:
            raise ValueError(
                f"a {kind.value} plugin cannot handle {wrong}; allowed: {sorted(a.value for a in allowed)}"
            )
        if len(set(actions)) != len(actions):
            raise ValueError("an action is listed twice")
        return actions

    @property
    def module(self) -> str:
        return self.entry_point.split(":", 1)[0]

    @property
    def classname(self) -> str:
        return self.entry_point.split(":", 1)[1]

    def sensitive_fields(self) -> frozenset[str]:
        return frozenset(name for name, spec in self.fields.items() if spec.sensitive)

    def resolve(self, values: Mapping[str, Any], *, check_required: bool = True) -> dict[str, Any]:
        """Apply defaults, parse declared fields; unknown fields pass through unchanged.

        Raises ValueError naming the field (without its value when the field is sensitive).
        """
        resolved = dict(values)
        for name, spec in self.fields.items():
            raw = values.get(name)
            if raw is None or (isinstance(raw, str) and raw == "" and spec.type not in ("text", "password")):
                if check_required and spec.required:
                    raise ValueError(f"missing required field {name!r} ({spec.label})")
                if spec.default is not None:
                    resolved[name] = spec.parse(spec.default)
                else:
                    resolved.pop(name, None)
                continue
            if check_required and spec.required and raw == "":
                raise ValueError(f"missing required field {name!r} ({spec.label})")
            try:
                resolved[name] = spec.parse(raw)
            except ValueError as err:
                detail = "invalid value" if spec.sensitive else str(err)
                raise ValueError(f"field {name!r} ({spec.label}): {detail}") from None
        return resolved

    def describe(self) -> dict[str, Any]:
        """The public view, for the provisioner's registration (no secret values exist here)."""
        return {
            "name": self.name,
            "type": self.type.value,
            "version": self.version,
            "description": self.description,
            "actions": [a.value for a in self.actions],
            "fields": {
                name: {"label": spec.label, "type": spec.type, "required": spec.required, "sensitive": spec.sensitive}
                | spec.model_dump(exclude_defaults=True)
                for name, spec in self.fields.items()
            },
        }


def _location(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


def load_descriptor(path: Path) -> PluginDescriptor:
    """Read and validate a descriptor; any problem is a PluginError naming the file and field."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise PluginError(f"{path}: cannot read plugin descriptor: {err.strerror or err}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise PluginError(f"{path}: plugin descriptor is not valid JSON: {err}") from None
    if not isinstance(raw, dict):
        raise PluginError(f"{path}: plugin descriptor must be a JSON object, got {type(raw).__name__}")
    try:
        return PluginDescriptor.model_validate(raw)
    except ValidationError as err:
        problems = "; ".join(
            f"field {_location(e['loc'])!r}: {problem_text(e)}" for e in err.errors(include_url=False)
        )
        raise PluginError(f"{path}: invalid plugin descriptor: {problems}") from None
