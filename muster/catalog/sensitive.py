"""Sensitive values in a catalog: provider fields that must not reach the log (a plugin declares
them sensitive, or their name or value looks like a credential), template config keys that
look like secrets, and masking for answers (docs/secrets.md)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from contracts.catalog import Catalog

from .plugins import PluginSpec, PluginSpecs
from .problems import Problem

SECRETS_HINT = "put it in the provisioner's secrets file under the provider's name (docs/secrets.md)"

# Field names that look like credentials. Used for provider fields no plugin descriptor
# declares (unknown provider types, or fields a plugin does not list).
SENSITIVE_NAME = re.compile(
    r"(pass(word|wd|phrase)?|secret|token|credential|private[_\-]?key|api[_\-]?key|access[_\-]?key|"
    r"secret[_\-]?key|client[_\-]?secret|auth[_\-]?key|session[_\-]?key|pwd)",
    re.IGNORECASE,
)
PRIVATE_KEY_TEXT = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")


def looks_sensitive(name: str) -> bool:
    return bool(SENSITIVE_NAME.search(name))


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
    declared = plugin.fields.get(name) if plugin else None
    if declared is not None:
        return declared.sensitive or holds_private_key(value)
    return looks_sensitive(name) or holds_private_key(value)


def holds_private_key(value: Any) -> bool:
    if isinstance(value, str):
        return bool(PRIVATE_KEY_TEXT.search(value))
    if isinstance(value, Mapping):
        return any(holds_private_key(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(holds_private_key(v) for v in value)
    return False


def config_warnings(catalog: Catalog) -> list[Problem]:
    """Template config keys that look like secrets: they are stored and shown in clear."""
    out = []
    for kind in ("clustertemplates", "partialtemplates"):
        for name, t in sorted(catalog.entities(kind).items()):
            for path in secret_looking_keys(t.defaults.config, "defaults.config"):
                out.append(Problem(kind, name, path, "looks like a secret; template config is stored in the log and shown in clear", "warning"))
    return out


def secret_looking_keys(value: Any, prefix: str) -> list[str]:
    found: list[str] = []
    if isinstance(value, Mapping):
        for k, v in value.items():
            path = f"{prefix}.{k}"
            if looks_sensitive(str(k)) and not isinstance(v, Mapping):
                found.append(path)
            found += secret_looking_keys(v, path)
    return found


MASK = "********"


def redact(catalog: Catalog, plugins: PluginSpecs | None = None) -> Catalog:
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


def strip_sensitive(catalog: Catalog, plugins: PluginSpecs | None = None) -> dict[str, list[str]]:
    """Leave sensitive provider fields out of `catalog` (in place); returns what was left out."""
    hidden = sensitive_provider_fields(catalog, plugins)
    for name, fields in hidden.items():
        p = catalog.providers[name]
        catalog.providers[name] = p.model_copy(update={"provisioner": {k: v for k, v in p.provisioner.items() if k not in fields}})
    return hidden
