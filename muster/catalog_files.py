"""Read a catalog from Coopr-format folders and files (JSON, or YAML)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from contracts.catalog import KINDS, Catalog


class CatalogFileError(ValueError):
    """A catalog file cannot be read; the message names the file and the field."""


def _read_document(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    try:
        return yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        raise CatalogFileError(f"{path}: not valid {path.suffix.lstrip('.').upper()}: {err}") from None


def describe_validation_error(err: ValidationError) -> str:
    """One line per problem, each naming the field by its dotted path."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(document)"
        parts.append(f"{loc}: {e['msg']}")
    return "; ".join(parts)


def parse_entity(kind: str, data: Any, source: str) -> Any:
    model = KINDS[kind]
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise CatalogFileError(f"{source}: {kind[:-1]}: {describe_validation_error(err)}") from None


def load_catalog(root: str | Path) -> Catalog:
    """A folder with providers/, hardwaretypes/, imagetypes/, services/, clustertemplates/
    (and optionally partialtemplates/), one JSON or YAML file per entity."""
    root = Path(root)
    if not root.is_dir():
        raise CatalogFileError(f"{root}: not a catalog folder")
    catalog = Catalog()
    for kind in KINDS:
        folder = root / kind
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if path.suffix not in (".json", ".yaml", ".yml"):
                continue
            entity = parse_entity(kind, _read_document(path), str(path))
            entities = catalog.entities(kind)
            if entity.name in entities:
                raise CatalogFileError(f"{path}: duplicate {kind[:-1]} name {entity.name!r}")
            entities[entity.name] = entity
    return catalog
