"""Template resolution: `extends` (a parent template) and `includes` (partial templates).

Order of application: the parent (itself resolved), then each include in order, then the
template's own body. Lists of names are unioned in order of first appearance; config is deep
merged with the later source winning, except keys set by an `immutable` partial, which no later
source may change. A cycle of `extends`/`includes` is an error naming the chain.
"""

from __future__ import annotations

from typing import Any

from contracts.catalog import Catalog, ClusterTemplate


class TemplateError(ValueError):
    """A template cannot be resolved; the message names the template and the cause."""


def _union(a: list[Any], b: list[Any]) -> list[Any]:
    out = list(a)
    for item in b:
        if item not in out:
            out.append(item)
    return out


def _deep_merge(base: dict[str, Any], top: dict[str, Any], locked: dict[str, Any], where: str) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if key in locked and not isinstance(locked[key], dict) and value != locked[key]:
            raise TemplateError(f"{where}: config key {key!r} is set by an immutable partial template and cannot be overridden")
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            sub_locked = locked.get(key)
            out[key] = _deep_merge(out[key], value, sub_locked if isinstance(sub_locked, dict) else {}, where)
        else:
            out[key] = value
    return out


def _merge(base: ClusterTemplate, top: ClusterTemplate, locked: dict[str, Any], where: str) -> ClusterTemplate:
    d, td = base.defaults, top.defaults
    defaults = d.model_copy(
        update={
            "services": _union(d.services, td.services),
            "config": _deep_merge(d.config, td.config, locked, where),
            **{k: getattr(td, k) for k in ("provider", "hardwaretype", "imagetype", "dnsSuffix", "provisionerclass")
               if getattr(td, k) is not None},
        }
    )
    c, tc = base.compatibility, top.compatibility
    compatibility = c.model_copy(
        update={k: _union(getattr(c, k), getattr(tc, k)) for k in ("hardwaretypes", "imagetypes", "services")}
    )
    k, tk = base.constraints, top.constraints
    layout = k.layout.model_copy(
        update={
            "mustcoexist": _union(k.layout.mustcoexist, tk.layout.mustcoexist),
            "cantcoexist": _union(k.layout.cantcoexist, tk.layout.cantcoexist),
        }
    )
    update: dict[str, Any] = {"layout": layout, "services": {**k.services, **tk.services}}
    # Only an explicit size overrides (model_copy marks updated fields as set, so an
    # inherited default must not be passed along as if it were explicit).
    if "size" in tk.model_fields_set:
        update["size"] = tk.size
    constraints = k.model_copy(update=update)
    return top.model_copy(
        update={
            "defaults": defaults,
            "compatibility": compatibility,
            "constraints": constraints,
            "administration": {**base.administration, **top.administration},
            "links": _union(base.links, top.links),
            "extends": None,
            "includes": [],
        }
    )


def resolve_template(catalog: Catalog, name: str) -> ClusterTemplate:
    """The template `name` with its parents and partials merged in."""
    return _resolve(catalog, name, catalog.clustertemplates, ())


def _resolve(catalog: Catalog, name: str, pool: dict[str, ClusterTemplate], chain: tuple[str, ...]) -> ClusterTemplate:
    if name in chain:
        raise TemplateError(f"template cycle: {' -> '.join((*chain, name))}")
    template = pool.get(name)
    if template is None:
        kind = "cluster template" if pool is catalog.clustertemplates else "partial template"
        raise TemplateError(f"unknown {kind} {name!r}" + (f" (referenced by {chain[-1]!r})" if chain else ""))
    chain = (*chain, name)
    result = ClusterTemplate(name=name)
    locked: dict[str, Any] = {}
    if template.extends is not None:
        result = _resolve(catalog, template.extends.name, catalog.clustertemplates, chain)
    for ref in template.includes:
        partial = _resolve(catalog, ref.name, catalog.partialtemplates, chain)
        result = _merge(result, partial, locked, f"template {name!r}")
        if catalog.partialtemplates[ref.name].immutable:
            locked = _deep_merge(locked, partial.defaults.config, {}, name)
    return _merge(result, template, locked, f"template {name!r}")
