"""Where the README or a guide spells a contract out as `Model {field, field: what, field?}`, every
field it names is one of that model's (contracts/): docs/planner.md recorded checks as
`ServiceStateObserved {node, ...}`, whose field is `node_id` (found walking the operator docs,
session 17). `a | b` without a colon is two fields; after a colon comes the value."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

from pydantic import BaseModel

import contracts

ROOT = Path(__file__).parents[2]
SPELLED = re.compile(r"\b([A-Z][A-Za-z]+) \{([^{}`]*)\}")
FIELD = re.compile(r"\s*([a-z_]\w*)")


def _models() -> dict[str, type[BaseModel]]:
    found: dict[str, type[BaseModel]] = {}
    for info in pkgutil.iter_modules(contracts.__path__):
        module = importlib.import_module(f"contracts.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == module.__name__:
                found.setdefault(name, value)
    return found


def _spelled() -> list[tuple[str, str, list[str]]]:
    """(where, model, the fields named) for each spelling of a model the contracts define."""
    models = _models()
    out = []
    for guide in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = guide.read_text()
        for found in SPELLED.finditer(text):
            model, body = found.groups()
            if model not in models:
                continue
            names = []
            for part in body.split(","):
                for alternative in [part.split(":")[0]] if ":" in part else part.split("|"):
                    if named := FIELD.match(alternative):
                        names.append(named.group(1))
            out.append((f"{guide.name}:{text[:found.start()].count(chr(10)) + 1}", model, names))
    return out


def test_every_field_a_guide_names_is_the_models() -> None:
    models = _models()
    wrong = [f"{where}: {model}.{name}" for where, model, names in _spelled() for name in names
             if name not in models[model].model_fields]
    assert wrong == []


def test_the_check_sees_what_it_checks() -> None:
    spelled = {(model, tuple(names)) for _, model, names in _spelled()}
    assert len(spelled) > 20
    assert ("TaskSucceeded", ("result", "ipaddresses", "hostname", "stdout", "stderr")) in spelled
    assert ("ExtendLease", ("cluster_id", "by_s", "until")) in spelled  # `by_s | until`
    assert ("ProvisionerDeregistered", ("provisioner_id", "session", "reason", "completed")) in spelled  # over two lines
