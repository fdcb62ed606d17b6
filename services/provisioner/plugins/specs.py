"""The plugins as the catalog sees them: a `PluginSpecs` registry built from the descriptors
(`plugin.json`) of the built-in plugins and of any extra plugin folders, as `muster provisioner
--plugins-dir` takes them. Only descriptors are read; no plugin code is imported.

The composition roots that validate catalogs (`muster catalog`, `muster up`) give this registry
to the catalog package, which knows no service."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from muster.catalog.plugins import PluginField, PluginSpec, PluginSpecs

from .descriptor import DESCRIPTOR_FILE, PluginError, load_descriptor
from .registry import BUILTIN_DIR, plugin_folders


def catalog_plugins(extra_dirs: Sequence[Path | str] = ()) -> PluginSpecs:
    """The built-in plugins' specs, then those of `extra_dirs`. Raises PluginError naming the
    folder, file and field of anything it cannot read."""
    return _specs((BUILTIN_DIR, *(Path(d).resolve() for d in extra_dirs)))


@lru_cache(maxsize=8)
def _specs(folders: tuple[Path, ...]) -> PluginSpecs:
    specs = []
    seen: dict[tuple[str, str], Path] = {}
    for folder in folders:
        for plugin in plugin_folders(folder):
            path = plugin / DESCRIPTOR_FILE
            d = load_descriptor(path)
            # What a provisioner refuses at its start, refused here too (without importing the
            # plugin's code: its dependencies may be on the provisioners' machines only).
            if (d.type.value, d.name) in seen:
                raise PluginError(f"{path}: field 'name': {d.type.value} plugin {d.name!r} is already defined by "
                                  f"{seen[(d.type.value, d.name)]}")
            if not _module_exists(plugin, d.module):
                raise PluginError(f"{path}: field 'entry_point': no module {d.module!r} in {plugin}")
            seen[(d.type.value, d.name)] = path
            fields = {name: PluginField(sensitive=f.sensitive, required=f.required, check=f.parse) for name, f in d.fields.items()}
            specs.append(PluginSpec(name=d.name, type=d.type.value, fields=fields))
    return PluginSpecs(specs)


def _module_exists(folder: Path, module: str) -> bool:
    base = folder.joinpath(*module.split("."))
    return base.with_suffix(".py").is_file() or base.is_dir()  # a module, a package (or a namespace one)
