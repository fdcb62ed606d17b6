"""Every pattern a contract's field has is said in words when a value does not fit it
(contracts/errors.py): a pool host's address was refused as `String should match pattern
'^[A-Za-z0-9.\\-:%\\[\\]]{1,253}$'`, a regular expression put to a person."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

import contracts
from contracts.errors import _pattern_words, describe_validation_error
from contracts.pools import HostSpec

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


def _patterns() -> dict[str, str]:
    """Each pattern of the contracts' models, with one field that has it."""
    found: dict[str, str] = {}

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                found.setdefault(node["pattern"], where)
            for key, value in node.items():
                walk(value, where if key in ("properties", "items", "anyOf", "$defs", "additionalProperties") else f"{where}.{key}")
        elif isinstance(node, list):
            for value in node:
                walk(value, where)

    for info in pkgutil.iter_modules(contracts.__path__):
        module = importlib.import_module(f"contracts.{info.name}")
        for name, model in vars(module).items():
            if inspect.isclass(model) and issubclass(model, BaseModel) and model.__module__ == module.__name__:
                walk(model.model_json_schema(), f"{info.name}.{name}")
    return found


PATTERNS = _patterns()


@pytest.mark.parametrize("pattern", sorted(PATTERNS), ids=[PATTERNS[p] for p in sorted(PATTERNS)])
def test_every_pattern_of_the_contracts_is_said_in_words(pattern: str) -> None:
    assert _pattern_words(pattern) is not None, f"{PATTERNS[pattern]}: {pattern} has no words in contracts/errors.py _PATTERNS"


def test_a_pool_hosts_fields_are_refused_in_words() -> None:
    with pytest.raises(ValidationError) as raised:
        HostSpec.model_validate({"id": "h 1", "address": "not an address", "host_keys": [KEY], "user": "Root",
                                 "properties": {"labels": ["a b"]}})
    said = describe_validation_error(raised.value)
    assert "address: 'not an address' is not allowed here: give a host name or an IP address" in said, said
    assert "id: 'h 1' is not allowed here" in said and "user: 'Root' is not allowed here: give a login name" in said
    assert "should match pattern" not in said
