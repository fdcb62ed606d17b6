"""`muster solve`: the solver from the command line, without a bus (docs/solver.md).

Exit 0 with the layout as JSON on stdout; exit 2 with `{"error": {"kind", "message"}}` on
stdout when the request is unsolvable or invalid (a bad catalog folder or existing-cluster
file included); anything else is an internal error (exit 1, one sentence on stderr), as for
every `muster` command (muster/cli_support.py).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import NoReturn

import click
from pydantic import ValidationError

from contracts.errors import describe_validation_error
from contracts.layout import Layout
from muster.catalog.files import CatalogFileError, load_catalog
from muster.cli_support import EXIT_INVALID, CliError, FilePath, NodeCount, guarded

from .domain import SolveError, SolveRequest
from .domain import solve as solve_layout


def _names(value: str | None) -> tuple[str, ...]:
    return tuple(name.strip() for name in (value or "").split(",") if name.strip())


def _fail(kind: str, message: str) -> NoReturn:
    raise CliError(message, EXIT_INVALID, document={"error": {"kind": kind, "message": message}})


def _read_layout(path: str, what: str = "the existing cluster") -> Layout:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        _fail("invalid", f"{path}: cannot read {what}: {err.strerror or err}")
    try:
        return Layout.model_validate_json(text)
    except ValidationError as err:
        _fail("invalid", f"{path}: not a layout: {describe_validation_error(err)}")


@click.command()
@click.option("--catalog", "catalog_dir", required=True, type=FilePath(), metavar="PATH",
              help="Coopr-format catalog folder, or a YAML or JSON file of entities (as `muster catalog apply` reads).")
@click.option("--template", required=True, metavar="NAME", help="Cluster template.")
@click.option("--nodes", required=True, type=NodeCount(), metavar="N", help="Node count of the cluster after the operation.")
@click.option("--services", default=None, metavar="a,b,...", help="Services (default: the template's).")
@click.option("--provider", default=None, metavar="P", help="Provider (default: the template's).")
@click.option("--hardware", default=None, metavar="H", help="Use only this hardware type.")
@click.option("--image", default=None, metavar="I", help="Use only this image type.")
@click.option("--comparator", default="default", metavar="default|coopr", help="Preference order of node layouts.")
@click.option("--existing", default=None, type=FilePath(), metavar="FILE", help="The current cluster, as JSON in the output's form.")
@click.option("--add-services", default=None, metavar="a,b", help="Services to add to the existing cluster.")
@click.option("--remove-services", default=None, metavar="a,b", help="Services to remove from the existing cluster.")
@click.option("--exclude", "exclude", multiple=True, type=FilePath(), metavar="FILE",
              help="A layout already tried (JSON in the output's form): the answer differs from it (repeatable).")
@guarded
def solve(
    catalog_dir: str,
    template: str,
    nodes: int,
    services: str | None,
    provider: str | None,
    hardware: str | None,
    image: str | None,
    comparator: str,
    existing: str | None,
    add_services: str | None,
    remove_services: str | None,
    exclude: tuple[str, ...],
) -> None:
    """Solve a cluster layout from a catalog folder (no bus)."""
    request = SolveRequest(
        template=template,
        nodes=nodes,
        services=_names(services) if services is not None else None,
        provider=provider,
        hardware=hardware,
        image=image,
        comparator=comparator,
        add_services=_names(add_services),
        remove_services=_names(remove_services),
        exclude=tuple(_read_layout(path, "an excluded layout") for path in exclude),
    )
    click.echo(json.dumps(_answer(catalog_dir, existing, request).model_dump()))


def _answer(catalog_dir: str, existing: str | None, request: SolveRequest) -> Layout:
    try:
        catalog = load_catalog(catalog_dir)
    except CatalogFileError as err:
        _fail("invalid", str(err))
    if existing is not None:
        request = replace(request, existing=_read_layout(existing))
    try:
        return solve_layout(catalog, request)
    except SolveError as err:
        _fail(err.kind, err.message)
