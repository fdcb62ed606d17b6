"""Sensitive values in a catalog: what must not reach the log (a provider field its plugin
declares sensitive; anywhere in any entity, a value under a secret's name or a private key:
contracts.secrets), and masking for answers (docs/secrets.md)."""

from __future__ import annotations

import json
from typing import Any

from contracts.catalog import Catalog
from contracts.secrets import MASK as MASK  # re-exported: answers mask with it
from contracts.secrets import is_reference, masked, private_keys, secret_name, secrets_in_clear

from .plugins import PluginSpec, PluginSpecs

SECRETS_HINT = ("put it in the provisioners' secrets file, under the provider's name, or as a named secret the "
                'catalog refers to as "secret://<name>" (docs/secrets.md)')


def looks_sensitive(name: str) -> bool:
    return secret_name(name)


def sensitive_provider_fields(catalog: Catalog, plugins: PluginSpecs | None = None) -> dict[str, list[str]]:
    """Provider name -> the fields of its `provisioner` map that must not be stored."""
    specs = plugins.providers if plugins is not None else {}
    out: dict[str, list[str]] = {}
    for name, provider in catalog.providers.items():
        plugin = specs.get(provider.providertype)
        found = [f for f, v in provider.provisioner.items() if is_sensitive(plugin, f, v)]
        if found:
            out[name] = sorted(found)
    return out


def is_sensitive(plugin: PluginSpec | None, name: str, value: Any) -> bool:
    """Whether a provider field must not be stored (`sensitive_paths` says where)."""
    return bool(sensitive_paths(plugin, name, value))


def sensitive_paths(plugin: PluginSpec | None, name: str, value: Any) -> list[str]:
    """Where a provider field carries a secret in clear, as paths starting at the field's name:
    the whole field if its plugin declares it sensitive; inside a declared one (a JSON object,
    or a string holding one: libcloud's `driver_args`), any private key and any value under a
    secret's name; and, for a field no plugin declares, any value under a secret's name at any
    depth (contracts.secrets). A `secret://<name>` reference is never a secret. (Inside a
    declared field only private keys counted until session 33: `driver_args: {"key": ...,
    "secret": ...}` reached the log in clear, and the driver took them as its credentials.)"""
    if is_reference(value):
        return []
    declared = plugin.fields.get(name) if plugin else None
    if declared is not None:
        return [name] if declared.sensitive else secrets_in_clear(_object_in(value), name)
    return secrets_in_clear(value, name, under_secret=secret_name(name))


def _object_in(value: Any) -> Any:
    """A JSON object given as a string (a plugin's `json` field may be either), else `value`."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def holds_private_key(value: Any) -> bool:
    return bool(private_keys(value))


NAMED_MAPS = ("providermap", "constraints.services")
"""An entity's maps keyed by other entities' names (a hardware type's providers, a template's
services): a provider called `github-auth` is a name, not a secret's."""


def entity_secrets(entity: Any) -> list[str]:
    """Secrets in clear anywhere in an entity other than a provider (template config, service
    action fields, provider maps), as field paths."""
    return secrets_in_clear(entity.model_dump(mode="json", exclude_none=True), names=NAMED_MAPS)


def redact(catalog: Catalog, plugins: PluginSpecs | None = None) -> Catalog:
    """A copy in which every secret in clear reads `********`: a sensitive provider field's
    value, and any secret at any depth of any entity (for answers; apply refuses them, this
    guards entities written by older versions)."""
    hidden = sensitive_provider_fields(catalog, plugins)
    update: dict[str, Any] = {}
    for kind in ("providers", "hardwaretypes", "imagetypes", "services", "clustertemplates", "partialtemplates"):
        entities = dict(catalog.entities(kind))
        changed = False
        for name, entity in entities.items():
            data = entity.model_dump(mode="json", exclude_none=True)
            shown = masked(data, names=NAMED_MAPS)
            if kind == "providers":
                shown["provisioner"] = {k: (MASK if k in hidden.get(name, []) else v) for k, v in shown.get("provisioner", {}).items()}
            if shown != data:
                entities[name], changed = type(entity).model_validate(shown), True
        if changed:
            update[kind] = entities
    return catalog.model_copy(update=update) if update else catalog


def strip_sensitive(catalog: Catalog, plugins: PluginSpecs | None = None) -> dict[str, list[str]]:
    """Leave sensitive provider fields out of `catalog` (in place); returns what was left out."""
    hidden = sensitive_provider_fields(catalog, plugins)
    for name, fields in hidden.items():
        p = catalog.providers[name]
        catalog.providers[name] = p.model_copy(update={"provisioner": {k: v for k, v in p.provisioner.items() if k not in fields}})
    return hidden
