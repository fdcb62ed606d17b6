"""Contract models and adapters build their validators on first use (`contracts.base.DEFERRED`):
importing the contracts builds none of them, and every one of them builds when asked, so a
broken schema cannot hide until some rarely used message arrives."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import subprocess
import sys

import pytest
from pydantic import BaseModel, TypeAdapter

import contracts

MODULES = [importlib.import_module(f"contracts.{m.name}") for m in pkgutil.iter_modules(contracts.__path__)]


def _models() -> list[type[BaseModel]]:
    return sorted({obj for mod in MODULES for _, obj in inspect.getmembers(mod, inspect.isclass)
                   if issubclass(obj, BaseModel) and obj is not BaseModel and obj.__module__.startswith("contracts.")},
                  key=lambda m: f"{m.__module__}.{m.__qualname__}")


def _adapters() -> list[tuple[str, TypeAdapter[object]]]:
    return [(f"{mod.__name__}.{name}", obj) for mod in MODULES for name, obj in vars(mod).items() if isinstance(obj, TypeAdapter)]


def test_importing_the_contracts_builds_no_validator() -> None:
    probe = (
        "import importlib, pkgutil, json, contracts\n"
        "from pydantic import BaseModel, TypeAdapter\n"
        "mods = [importlib.import_module(f'contracts.{m.name}') for m in pkgutil.iter_modules(contracts.__path__) if m.name != 'asyncapi']\n"
        "built = sorted({f'{m.__name__}.{k}' for m in mods for k, v in vars(m).items()\n"
        "    if (isinstance(v, type) and issubclass(v, BaseModel) and v is not BaseModel and v.__pydantic_complete__)\n"
        "    or (isinstance(v, TypeAdapter) and v.pydantic_complete)})\n"
        "print(json.dumps(built))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == []


def test_there_is_something_to_check() -> None:
    assert len(_models()) > 100 and len(_adapters()) >= 5


@pytest.mark.parametrize("model", _models(), ids=lambda m: f"{m.__module__}.{m.__qualname__}")
def test_every_model_builds(model: type[BaseModel]) -> None:
    model.model_rebuild(force=True)
    assert model.__pydantic_complete__
    assert model.model_json_schema()["title"]


@pytest.mark.parametrize(("name", "adapter"), _adapters(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_adapter_builds(name: str, adapter: TypeAdapter[object]) -> None:
    adapter.rebuild(force=True)
    assert adapter.pydantic_complete, name
