"""What catalog validation needs to know about plugins, read from their descriptors.

Only `plugin.json` files are read (no plugin code is imported): the built-in plugins, plus any
folders given (a plugin folder, or a folder of plugin folders, as `muster provisioner
--plugins-dir` takes them).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from contracts.catalog import Catalog
from contracts.catalog_validation import PluginField, PluginSpec, sensitive_provider_fields

MASK = "********"
BUILTIN_PLUGINS = Path(__file__).parents[1] / "services" / "provisioner" / "plugins" / "builtin"


def _descriptor_files(folder: Path) -> list[Path]:
    if (folder / "plugin.json").is_file():
        return [folder / "plugin.json"]
    return sorted(p / "plugin.json" for p in folder.iterdir() if (p / "plugin.json").is_file()) if folder.is_dir() else []


@lru_cache(maxsize=8)
def _specs(folders: tuple[Path, ...]) -> tuple[PluginSpec, ...]:
    from services.provisioner.plugins.descriptor import load_descriptor

    specs = []
    for folder in folders:
        for path in _descriptor_files(folder):
            d = load_descriptor(path)  # PluginError names the file and field
            fields = {
                name: PluginField(sensitive=f.sensitive, required=f.required, check=f.parse) for name, f in d.fields.items()
            }
            specs.append(PluginSpec(name=d.name, type=d.type.value, fields=fields))  # type: ignore[arg-type]
    return tuple(specs)


def plugin_specs(extra_dirs: Sequence[Path] = ()) -> list[PluginSpec]:
    """The built-in plugins' specs, then those of `extra_dirs`."""
    return list(_specs((BUILTIN_PLUGINS, *(Path(d).resolve() for d in extra_dirs))))


def redact(catalog: Catalog, plugins: Sequence[PluginSpec] = ()) -> Catalog:
    """A copy in which every sensitive provider field's value reads `********` (for answers;
    apply refuses such fields, this guards entities written by older versions)."""
    hidden = sensitive_provider_fields(catalog, plugins)
    if not hidden:
        return catalog
    providers = dict(catalog.providers)
    for name, fields in hidden.items():
        p = providers[name]
        providers[name] = p.model_copy(update={"provisioner": {k: (MASK if k in fields else v) for k, v in p.provisioner.items()}})
    return catalog.model_copy(update={"providers": providers})
