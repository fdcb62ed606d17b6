"""From catalog + request to what the stages work on: the resolved template, the provider,
the candidate hardware and image types, the comparator (coopr-facts §3.1).

Everything a person could have mistyped is checked here and reported as `invalid`, naming
the thing and what would be accepted instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from contracts.catalog import Catalog, ClusterTemplate, HardwareType, ImageType
from muster.catalog.templates import TemplateError, resolve_template

from .comparators import COMPARATORS, Comparator, make_comparator
from .errors import invalid
from .request import SolveRequest


@dataclass(frozen=True)
class Setting:
    catalog: Catalog
    template: ClusterTemplate
    provider: str
    hardware: tuple[str, ...]  # candidates, sorted
    images: tuple[str, ...]
    comparator: Comparator
    # Why a hardware/image type outside the candidates is out, for explanations.
    hardware_scope: str
    image_scope: str


def names(items: Iterable[str]) -> str:
    items = list(items)
    return ", ".join(items) if items else "none"


def resolve_setting(catalog: Catalog, request: SolveRequest) -> Setting:
    try:
        template = resolve_template(catalog, request.template)
    except TemplateError as err:
        raise invalid(str(err)) from None
    if request.comparator not in COMPARATORS:
        raise invalid(f"unknown comparator {request.comparator!r}; use one of {', '.join(COMPARATORS)}")
    provider = request.provider or template.defaults.provider
    if provider is None:
        raise invalid(f"template {template.name!r} has no default provider; name one")
    if provider not in catalog.providers:
        raise invalid(f"unknown provider {provider!r}; the catalog has {names(sorted(catalog.providers))}")
    coopr = request.comparator == "coopr"
    # Coopr treats the template's default hardware/image as required; our default comparator
    # only prefers the default image and picks hardware by cost.
    hw_required = request.hardware or (template.defaults.hardwaretype if coopr else None)
    img_required = request.image or (template.defaults.imagetype if coopr else None)
    hw_why = "was requested" if request.hardware else "is the template's default, which the coopr comparator requires"
    img_why = "was requested" if request.image else "is the template's default, which the coopr comparator requires"
    hardware, hw_scope = _candidates(
        "hardware type", "flavor", catalog.hardwaretypes, template.compatibility.hardwaretypes,
        hw_required, provider, template.name, hw_why,
    )
    images, img_scope = _candidates(
        "image type", "image", catalog.imagetypes, template.compatibility.imagetypes,
        img_required, provider, template.name, img_why,
    )
    return Setting(
        catalog=catalog,
        template=template,
        provider=provider,
        hardware=hardware,
        images=images,
        comparator=make_comparator(request.comparator, catalog, template, provider),
        hardware_scope=hw_scope,
        image_scope=img_scope,
    )


def _candidates(
    kind: str,
    key: str,
    entities: Mapping[str, HardwareType | ImageType],
    compatible: list[str],
    required: str | None,
    provider: str,
    template: str,
    why_required: str,
) -> tuple[tuple[str, ...], str]:
    def usable(name: str) -> bool:
        return key in entities[name].providermap.get(provider, {})

    if required is not None:
        if required not in entities:
            raise invalid(f"unknown {kind} {required!r}; the catalog has {names(sorted(entities))}")
        if compatible and required not in compatible:
            raise invalid(f"{kind} {required!r} is not allowed by template {template!r} (allowed: {names(compatible)})")
        if not usable(required):
            raise invalid(f"{kind} {required!r} has no {key} for provider {provider!r}")
        return (required,), f"{required} {why_required}"
    found = tuple(sorted(n for n in entities if (not compatible or n in compatible) and usable(n)))
    if not found:
        raise invalid(
            f"no {kind} is available: none of {names(compatible or sorted(entities))} "
            f"has a {key} for provider {provider!r}"
        )
    return found, f"available with provider {provider}: {names(found)}"
