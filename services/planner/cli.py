"""`muster plan`: the task DAG of an operation, as JSON, without a bus (docs/planner.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from contracts.catalog import Catalog
from contracts.errors import describe_validation_error
from contracts.layout import Layout, NodeSpec
from muster.bus.shards import lease_table
from muster.catalog.files import CatalogFileError, load_catalog
from muster.catalog.templates import TemplateError, resolve_template
from muster.cli_bus import Bus, bus_options, open_nats
from muster.cli_support import EXIT_INVALID, CliError, command, guarded, json_flag
from services.governance.domain.cost import plan_cost

from .domain.errors import services_named
from .domain.operations import OFFLINE, ROLLING
from .domain.plan import PlanError, build_plan
from .domain.planning import catalog_node_factory
from .domain.resize import expand
from .domain.rolling import batched

CLI_OPERATIONS = OFFLINE
"""What `muster plan` plans without a solver, from a nodes file."""
CLI_ROLLING = tuple(op for op in ROLLING if op in CLI_OPERATIONS)

MODES = ("eager", "staged")



class Invalid(ValueError):
    """Bad input: exit 2 with `{"error": {"kind": "invalid", ...}}` on stdout; anything else is
    an internal error (exit 1, one sentence on stderr), as for every `muster` command."""


@click.command("plan")
@click.option("--catalog", "catalog_dir", metavar="PATH",
              help="Catalog folder in Coopr's format, or a YAML or JSON file of entities (as `muster catalog apply` reads).")
@click.option("--template", help="Cluster template name (must exist in the catalog).")
@click.option("--nodes-file", help='JSON {"nodes": [{"id", "hardwaretype", "imagetype", "services"}]}, or the layout '
              '`muster solve` prints (nodes numbered from n1000, as the planner numbers them).')
@click.option("--operation", help=f"One of: {', '.join(CLI_OPERATIONS)}.")
@click.option("--services", default=None, help="Comma-separated services to add / remove / start / stop / restart.")
@click.option("--mode", default="eager", show_default=True, help="eager or staged: how the plan would be run.")
@click.option("--rolling", default=None, metavar="N|P%",
              help=f"{', '.join(CLI_ROLLING)}: a batch of N nodes (or P% of them) at a time; prints the batches")
@guarded
def plan(catalog_dir: str | None, template: str | None, nodes_file: str | None, operation: str | None,
         services: str | None, mode: str, rolling: str | None) -> None:
    """Plan the task DAG of an operation (dry run, no bus). Prints tasks, edges and stages."""
    try:
        result = dry_run(catalog_dir, template, nodes_file, operation, services, mode, rolling)
    except Invalid as err:  # for scripts: the error as JSON on stdout, exit 2
        raise CliError(str(err), EXIT_INVALID, document={"error": {"kind": "invalid", "message": str(err)}}) from None
    click.echo(dumps(result))


def dumps(result: dict[str, Any]) -> str:
    """JSON with one task, edge or stage per line."""
    parts = []
    for key, items in result.items():
        if isinstance(items, dict):  # the cost
            parts.append(f"  {json.dumps(key)}: {json.dumps(items)}")
            continue
        body = ",\n".join(f"    {json.dumps(item)}" for item in items)
        parts.append(f"  {json.dumps(key)}: [\n{body}\n  ]" if items else f"  {json.dumps(key)}: []")
    return "{\n" + ",\n".join(parts) + "\n}"


def dry_run(catalog_dir: str | None, template: str | None, nodes_file: str | None, operation: str | None,
            services: str | None, mode: str, rolling: str | None = None) -> dict[str, Any]:
    required = {"--catalog": catalog_dir, "--template": template, "--nodes-file": nodes_file, "--operation": operation}
    missing = [flag for flag, value in required.items() if not value]
    if missing or catalog_dir is None or template is None or nodes_file is None or operation is None:
        raise Invalid(f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} required")
    if operation not in CLI_OPERATIONS:
        raise Invalid(f"unknown operation {operation!r}; operations are {', '.join(CLI_OPERATIONS)}")
    if mode not in MODES:
        raise Invalid(f"unknown mode {mode!r}; modes are {', '.join(MODES)}")
    try:
        catalog = load_catalog(catalog_dir)
        defaults = resolve_template(catalog, template).defaults
        provider = defaults.provider or ""
    except (CatalogFileError, TemplateError) as err:
        raise Invalid(str(err)) from None
    read = read_nodes(nodes_file)
    nodes = read if isinstance(read, list) else layout_nodes(catalog, template, provider, read)
    named = [s.strip() for s in services.split(",") if s.strip()] if services is not None else None
    try:
        if operation == "add-services":
            nodes = with_added_services(catalog, nodes, named)
        # The template's config, as a create's tasks carry it: its macros may make a task wait.
        planned = build_plan(catalog.services, nodes, operation, services=named, config=defaults.config)
        # What the nodes cost an hour, from the catalog's hardware types (docs/governance.md).
        cost = {"cost": plan_cost(catalog.hardwaretypes, provider, nodes).model_dump(mode="json", exclude={"before_per_hour", "before_by_hardware"})}
        if rolling is None:
            return {**planned.to_json(), **cost}
        if operation not in ROLLING:
            raise Invalid(f"--rolling goes with {', '.join(CLI_ROLLING)}")
        done = batched(planned, int(rolling) if rolling.strip().isdigit() else rolling)
        return {**done.plan.to_json(), "batches": done.batches, **cost}
    except PlanError as err:
        raise Invalid(str(err)) from None


def read_nodes(path: str) -> list[NodeSpec] | Layout:
    """The nodes the file lists, or the layout it holds (`muster solve`'s answer)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise Invalid(f"{path}: cannot read a JSON nodes file: {err}") from None
    if isinstance(data, dict) and isinstance(data.get("layout"), list):
        try:
            return Layout.model_validate(data)
        except ValidationError as err:
            raise Invalid(f"{path}: not a layout as `muster solve` prints it: {describe_validation_error(err)}") from None
    if isinstance(data, dict) and isinstance(data.get("error"), dict):  # `muster solve ... > file` that failed
        raise Invalid(f"{path} holds no layout but the error `muster solve` answered: {data['error'].get('message', '?')}")
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise Invalid(f'{path}: expected {{"nodes": [...]}}, or the layout `muster solve` prints ({{"nodes": N, "layout": [...]}})')
    nodes = []
    for i, raw in enumerate(data["nodes"]):
        if not isinstance(raw, dict):
            raise Invalid(f"{path}: nodes.{i}: expected an object")
        fields = {"hardwaretype": "", "imagetype": "", **{k: v for k, v in raw.items() if k in NodeSpec.model_fields}}
        try:
            nodes.append(NodeSpec.model_validate(fields))
        except ValidationError as err:
            raise Invalid(f"{path}: nodes.{i}: {describe_validation_error(err)}") from None
    return nodes


def layout_nodes(catalog: Catalog, template: str, provider: str, layout: Layout) -> list[NodeSpec]:
    """A new cluster's nodes from a solved layout, numbered and named as the planner makes them
    (the template stands for the cluster's name)."""
    try:
        return list(expand([], layout, catalog_node_factory(template, provider, catalog, [])).nodes)
    except PlanError as err:
        raise Invalid(str(err)) from None


def with_added_services(catalog: Catalog, nodes: list[NodeSpec], named: list[str] | None) -> list[NodeSpec]:
    """The layout after add-services: a named service the file does not place on any node is
    added to every node; one the file already places stays where it is (the file is then read
    as the layout after the operation)."""
    if not named:
        raise Invalid("add-services needs --services (the services to add)")
    unknown = sorted(set(named) - set(catalog.services))
    if unknown:
        raise Invalid(f"{services_named(unknown)} not in the catalog")
    placed = {s for n in nodes for s in n.services}
    new = [s for s in dict.fromkeys(named) if s not in placed]
    return [n.model_copy(update={"services": [*n.services, *new]}) for n in nodes]


@click.command("planners")
@bus_options(tenant=False)
@json_flag("members and shard owners as JSON")
@command
async def planners(bus: Bus, as_json: bool) -> None:
    """Live planners and the shards each acts for (from the `leases` bucket, docs/scaling.md)."""
    async with open_nats(bus) as nc:
        members, owners = await lease_table(nc.jetstream())
    held: dict[str, list[int]] = {name: [] for name in members}
    for shard, owner in sorted(owners.items()):
        held.setdefault(owner, []).append(shard)
    shards = max((int(m.get("shards", 0)) for m in members.values()), default=len(owners))
    if as_json:
        click.echo(json.dumps({"shards": shards, "planners": held, "unowned": [s for s in range(shards) if s not in owners]}, indent=2))
        return
    if not members and not owners:
        click.echo("no live planners")
        return
    click.echo(f"{'PLANNER':<40} {'SHARDS':>6}  HELD")
    for name, mine in sorted(held.items()):
        state = "" if name in members else "  (gone: its leases expire)"
        click.echo(f"{name:<40} {len(mine):>6}  {','.join(map(str, mine))}{state}")
    free = [s for s in range(shards) if s not in owners]
    if free:
        click.echo(f"{'(no planner)':<40} {len(free):>6}  {','.join(map(str, free))}")
