"""Read a catalog from Coopr-format folders and files (JSON, or YAML).

Accepted shapes (`load_sources`):
- a catalog folder: `providers/`, `hardwaretypes/`, `imagetypes/`, `services/`,
  `clustertemplates/`, `partialtemplates/`, one entity per file (Coopr's layout);
- a kind folder (`.../services/`), or a file inside one: every entity is of that kind;
- a bundle file: `{"services": [...], "clustertemplates": {...}, ...}` (lists, or maps by name;
  Coopr's `clusterTemplates`/`partialTemplates` spellings too);
- a file of entities that say what they are: `kind: service` (YAML files may hold several
  documents separated by `---`).

`load_sources` collects every problem (file, entity, field) instead of stopping at the first,
a key no field reads as a warning (`unknown.py`); `load_catalog` keeps the old behaviour for
callers that want an exception (at the first error).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from contracts.catalog import KINDS, Catalog
from contracts.errors import describe_validation_error, problem_text

from .problems import Problem
from .unknown import unknown_fields

SUFFIXES = (".json", ".yaml", ".yml")

KIND_ALIASES: dict[str, str] = {
    **{k: k for k in KINDS},
    **{k[:-1]: k for k in KINDS},
    "hardware": "hardwaretypes",
    "image": "imagetypes",
    "template": "clustertemplates",
    "templates": "clustertemplates",
    "partial": "partialtemplates",
    "partials": "partialtemplates",
}


class CatalogFileError(ValueError):
    """A catalog file cannot be read; the message names the file and the field."""


def kind_of(word: str) -> str | None:
    """'service', 'Services', 'clusterTemplates', 'cluster-template' -> the catalog kind."""
    return KIND_ALIASES.get(word.lower().replace("-", "").replace("_", ""))


def parse_entity(kind: str, data: Any, source: str) -> Any:
    model = KINDS[kind]
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise CatalogFileError(f"{source}: {kind[:-1]}: {describe_validation_error(err)}") from None


@dataclass
class LoadedCatalog:
    """Entities read from files, where each came from, and what was wrong."""

    catalog: Catalog = field(default_factory=Catalog)
    sources: dict[tuple[str, str], str] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def source(self, kind: str, name: str) -> str | None:
        return self.sources.get((kind, name))

    @property
    def count(self) -> int:
        return len(self.sources)


def _documents(path: Path) -> list[Any]:
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix in (".yaml", ".yml"):
            return [d for d in yaml.safe_load_all(text) if d is not None]
        return [json.loads(text)]
    except json.JSONDecodeError as err:
        raise CatalogFileError(f"not valid JSON: {err}") from None
    except yaml.YAMLError as err:
        raise CatalogFileError(f"not valid YAML: {_yaml_problem(err)}") from None


def _yaml_problem(err: yaml.YAMLError) -> str:
    """One line, as the JSON error reads: PyYAML's own text spans lines, quotes the text and
    says `in "<unicode string>"` where the file's name belongs."""
    if not isinstance(err, yaml.MarkedYAMLError):
        return str(err).replace("\n", " ")
    mark = err.problem_mark or err.context_mark
    where = f" (line {mark.line + 1} column {mark.column + 1})" if mark is not None else ""
    context = f", {err.context}" if err.context else ""
    context_at = err.context_mark
    if context and context_at is not None and context_at is not mark:
        context += f" started at line {context_at.line + 1} column {context_at.column + 1}"
    return f"{err.problem or 'cannot be parsed'}{where}{context}"


def _entities_of(doc: Any, folder_kind: str | None) -> Iterable[tuple[str | None, Any]]:
    """(kind, raw entity) pairs of one document; kind None = cannot tell."""
    if isinstance(doc, list):
        for item in doc:
            yield from _entities_of(item, folder_kind)
        return
    if not isinstance(doc, dict):
        yield (folder_kind, doc)
        return
    if folder_kind is not None:
        yield (folder_kind, doc)
        return
    if isinstance(doc.get("kind"), str):
        yield (kind_of(doc["kind"]) or f"?{doc['kind']}", doc)
        return
    bundle = {k: kind_of(k) for k in doc}
    if doc and "name" not in doc and all(bundle.values()):
        for key, kind in bundle.items():
            value = doc[key]
            items = list(value.values()) if isinstance(value, dict) else value if isinstance(value, list) else [value]
            for item in items:
                yield (kind, item)
        return
    yield (None, doc)


class _Loader:
    def __init__(self) -> None:
        self.out = LoadedCatalog()

    def problem(self, source: Path | str, message: str, kind: str = "", name: str = "", field: str = "") -> None:
        self.out.problems.append(Problem(kind, name or "?", field, message, "error", str(source)))

    def add_file(self, path: Path, folder_kind: str | None) -> None:
        try:
            docs = _documents(path)
        except CatalogFileError as err:
            self.out.problems.append(Problem("", path.stem, "", str(err), "error", str(path)))
            return
        except (OSError, UnicodeDecodeError) as err:
            self.out.problems.append(Problem("", path.stem, "", f"cannot read: {err}", "error", str(path)))
            return
        for kind, raw in (pair for doc in docs for pair in _entities_of(doc, folder_kind)):
            named = raw.get("name") if isinstance(raw, dict) else None
            name = named if isinstance(named, str) else path.stem
            if kind is None:
                self.problem(path, "cannot tell which kind of entity this is: put the file in a folder named after its kind "
                             "(providers/, hardwaretypes/, imagetypes/, services/, clustertemplates/, partialtemplates/), "
                             "add a 'kind' field, or use a bundle such as {\"services\": [...]}", name=name)
                continue
            if kind.startswith("?"):
                self.problem(path, f"unknown kind {kind[1:]!r}; kinds are {', '.join(KINDS)}", name=name, field="kind")
                continue
            self.add_entity(path, kind, raw, name)

    def add_entity(self, path: Path, kind: str, raw: Any, name: str) -> None:
        try:
            entity = KINDS[kind].model_validate(raw)
        except ValidationError as err:
            for e in err.errors():
                loc = ".".join(str(p) for p in e["loc"]) or ""
                self.out.problems.append(Problem(kind, name, loc, problem_text(e), "error", str(path)))
            return
        entities = self.out.catalog.entities(kind)
        if entity.name in entities:
            first = self.out.sources[(kind, entity.name)]
            self.out.problems.append(Problem(kind, entity.name, "name", f"duplicate name (also defined in {first})", "error", str(path)))
            return
        entities[entity.name] = entity
        self.out.sources[(kind, entity.name)] = str(path)
        for where, message in unknown_fields(entity, raw):
            self.out.problems.append(Problem(kind, entity.name, where, message, "warning", str(path)))

    def add_folder(self, folder: Path, folder_kind: str | None) -> None:
        for path in sorted(folder.iterdir()):
            if path.is_file() and path.suffix in SUFFIXES:
                self.add_file(path, folder_kind)

    def add(self, path: Path) -> None:
        if path.is_dir():
            kinds = [k for k in KINDS if (path / k).is_dir()]
            if kinds:
                for kind in kinds:
                    self.add_folder(path / kind, kind)
            elif kind_of(path.name) in KINDS:
                self.add_folder(path, kind_of(path.name))
            else:
                self.problem(path, f"not a catalog folder: it has none of {', '.join(k + '/' for k in KINDS)}")
        elif path.is_file():
            self.add_file(path, kind_of(path.parent.name))
        else:
            self.problem(path, "no such file or folder")


def load_sources(paths: Sequence[str | Path]) -> LoadedCatalog:
    """Every entity of the given folders and files, with every problem found while reading."""
    loader = _Loader()
    for p in paths:
        loader.add(Path(p))
    return loader.out


def load_catalog(root: str | Path) -> Catalog:
    """A folder with providers/, hardwaretypes/, imagetypes/, services/, clustertemplates/
    (and optionally partialtemplates/), one JSON or YAML file per entity, or one file of
    entities, as `muster catalog apply` reads them (`muster solve --catalog
    examples/catalog-real/catalog.yaml` said "not a catalog folder"). Raises CatalogFileError
    (file and field) at the first problem; a folder that holds only such files names one."""
    root = Path(root)
    if not root.exists():
        raise CatalogFileError(f"{root}: no such catalog folder or file")
    loaded = load_sources([root])
    errors = [p for p in loaded.problems if p.is_error]
    if not errors:
        return loaded.catalog
    files = sorted(f.name for f in root.iterdir() if f.is_file() and f.suffix in SUFFIXES) if root.is_dir() else []
    hint = f"; a file of entities is read too: {root / files[0]}" if files and "not a catalog folder" in str(errors[0]) else ""
    raise CatalogFileError(f"{errors[0]}{hint}")
