"""`muster catalog`: validate, apply, diff, read (get, history) and delete the tenant's catalog (docs/client.md)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from contracts.catalog import KINDS, Catalog
from contracts.catalog_requests import ApplyCatalog, CatalogAnswer, CatalogProblem, DeleteCatalogEntity
from contracts.subjects import ANONYMOUS
from muster.bus.connect import principal_of
from muster.bus.eventstore import EventStore
from muster.cli_bus import Bus, bus_options, open_client
from muster.cli_support import EXIT_DENIED, EXIT_INVALID, CliError, FilePath, command, echo_json, guarded, json_option, translates
from muster.client import default_user
from muster.help_group import WholeHelpGroup
from muster.tables import Output, print_rows
from muster.times import shown_time
from muster.tracker_client import TrackerReads
from services.provisioner.plugins.descriptor import PluginError
from services.provisioner.plugins.specs import catalog_plugins

from .delete import DeleteRefused, NotInCatalog, delete_entity
from .files import CatalogFileError, LoadedCatalog, kind_of, load_sources
from .plugins import PluginSpecs
from .problems import KIND_LABEL, Problem
from .requests import ask_planner, problem_json
from .sensitive import strip_sensitive
from .store import CatalogRejected, CatalogState, append_changes, check_apply, read_state
from .templates import TemplateError, resolve_template
from .validation import validate_catalog

out = Output(highlight=False, soft_wrap=True, markup=False)
err = Output(stderr=True, highlight=False, soft_wrap=True, markup=False)


def _plugins_option(f: Any) -> Any:
    return click.option("--plugins-dir", multiple=True, type=FilePath(file_okay=False, path_type=Path),
                        help="extra plugin folders whose descriptors apply (as the provisioners load them)")(f)


def _specs(dirs: Sequence[Path] = ()) -> PluginSpecs:
    """The plugins to check against: the provisioner's descriptors (this command is where the
    catalog and the provisioner's plugins meet)."""
    try:
        return catalog_plugins(dirs)
    except PluginError as e:
        raise CliError(str(e)) from None


def _writer(nc: Any, by: str | None) -> str:
    """Who the log records as writing: with a token, its authenticated principal (the client
    cannot choose `by`); --by only names a writer on a bus without authorization."""
    principal = principal_of(nc)
    return principal if principal != ANONYMOUS else by or default_user()


def _kind(word: str) -> str:
    kind = kind_of(word)
    if kind is None:
        first, slash, rest = word.partition("/")
        if slash and kind_of(first) is not None:  # as a grant's scope names one (`catalog:hardwaretypes/small`)
            raise CliError(f"unknown kind {word!r}: give the kind and the name apart, `{kind_of(first)} {rest}`")
        raise CliError(f"unknown kind {word!r}; kinds are {', '.join(KINDS)}")
    return kind


class KindArgument(click.Argument):
    """KIND left out: click's bare "Missing argument 'KIND'" named no kind; this says which exist
    and gives an example (`example` follows the command's path)."""

    def __init__(self, *args: Any, example: str = "clustertemplates", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.example = example

    def process_value(self, ctx: click.Context, value: Any) -> Any:
        try:
            return super().process_value(ctx, value)
        except click.MissingParameter:
            raise click.UsageError(f"which kind? KIND is one of {', '.join(KINDS)} (or a singular, or 'templates'); "
                                   f"e.g. {ctx.command_path} {self.example}", ctx) from None


def _load(paths: Sequence[Path], consequence: str) -> LoadedCatalog:
    loaded = load_sources(paths)
    _print_problems(loaded.problems)
    errors = [p for p in loaded.problems if p.is_error]
    if errors:
        raise CliError(f"{len(errors)} file error(s); {consequence}", EXIT_INVALID)
    return loaded


def _print_problems(problems: Sequence[Problem]) -> None:
    for p in problems:
        style = "red" if p.is_error else "yellow"
        err.print(f"[{style}]{p.severity}[/{style}]: {escape(str(p))}", markup=True, highlight=False)  # ([a-z0-9] is text)


def _problem_json(p: Problem) -> dict[str, Any]:
    return {"severity": p.severity, "file": p.source, "kind": p.kind, "entity": p.name, "field": p.field, "message": p.message}


@translates
def catalog_errors(err: BaseException) -> CliError | None:
    """A catalog that cannot be read or applied: bad input (exit 2)."""
    return CliError(str(err), EXIT_INVALID) if isinstance(err, CatalogFileError) else None


@click.group("catalog", cls=WholeHelpGroup)
def catalog() -> None:
    """Administer the tenant's catalog: providers, hardware, images, services, templates."""


@catalog.command("validate")
@click.argument("paths", nargs=-1, required=True, type=FilePath(path_type=Path))
@_plugins_option
@json_option
@guarded
def validate(paths: tuple[Path, ...], plugins_dir: tuple[Path, ...], as_json: bool) -> None:
    """Check catalog folders/files on their own, without the bus (for CI)."""
    loaded = load_sources(paths)
    problems = list(loaded.problems)
    if not any(p.is_error for p in problems):
        problems += [replace(p, source=loaded.source(p.kind, p.name) or "") for p in validate_catalog(loaded.catalog, _specs(plugins_dir))]
    errors = [p for p in problems if p.is_error]
    if as_json:
        echo_json({"valid": not errors, "entities": loaded.count, "problems": [_problem_json(p) for p in problems]})
    else:
        _print_problems(problems)
        if not errors:
            out.print(f"{loaded.count} entities: valid")
    if errors:
        raise CliError(f"{len(errors)} error(s) in the catalog", EXIT_INVALID)


@catalog.command("apply")
@click.argument("paths", nargs=-1, required=True, type=FilePath(path_type=Path))
@bus_options
@_plugins_option
@click.option("--by", default=None, help="who is applying, without a token (with one, the log records its principal)")
@click.option("--drop-sensitive", is_flag=True,
              help="leave sensitive provider fields out (they belong in the provisioners' secrets file) instead of refusing")
@click.option("--dry-run", is_flag=True,
              help="check it as an apply would (your grants, the whole catalog it would leave) and print what would change; "
                   "nothing is written")
@json_option
@command
async def apply(paths: tuple[Path, ...], bus: Bus, plugins_dir: tuple[Path, ...], by: str | None, drop_sensitive: bool,
                dry_run: bool, as_json: bool) -> None:
    """Validate every entity against the catalog in the log and append the changes, all or none."""
    plugins = _specs(plugins_dir)
    loaded = _load(paths, "nothing was applied")
    dropped = strip_sensitive(loaded.catalog, plugins) if drop_sensitive else {}
    request = ApplyCatalog(catalog=loaded.catalog.model_dump(mode="json"), dry_run=dry_run,
                           sources={f"{k}/{n}": src for (k, n), src in loaded.sources.items()}, requested_by=by or default_user())
    async with await open_client(bus) as client:
        tenant = client.tenant
        answer = await client.refusals.guard(ask_planner(client.nc, tenant, request), principal_of(client.nc), tenant)
        if answer is None:  # no planner: append it ourselves (the right to is the bus's to give)
            answer = await _apply_here(client.nc, tenant, loaded, plugins, by, dry_run)
    problems = [*loaded.problems, *(_problem_of(p) for p in answer.problems)]
    if not as_json:
        _print_problems([_problem_of(p) for p in answer.problems if p.severity != "error"])
    if not answer.ok:
        if as_json:
            echo_json({"applied": 0, "problems": [_problem_json(p) for p in problems], **({"dry_run": True} if dry_run else {})})
        else:
            _print_problems([p for p in problems if p.is_error])
        if dry_run:
            errors = [p for p in problems if p.is_error]
            raise CliError(f"dry run: apply would be refused ({len(errors)} error(s)); nothing was written", EXIT_INVALID)
        raise CatalogRejected([p for p in problems if p.is_error])
    if as_json:
        echo_json({"applied": 0 if dry_run else len(answer.seqs), "changes": answer.changes,
                   "dropped_sensitive": dropped, "problems": [_problem_json(p) for p in problems],
                   **({"dry_run": True} if dry_run else {})})
        return
    for name, fields in dropped.items():
        err.print(f"left out of provider {name!r}: {', '.join(fields)} — set them in the provisioners' secrets file "
                  f"(docs/secrets.md): {json.dumps({name: {f: '...' for f in fields}})}")
    _print_changes(answer.changes)
    unchanged = loaded.count - len(answer.changes)
    tail = f"; {unchanged} unchanged" if unchanged else ""
    if dry_run:
        out.print(f"dry run: would apply {len(answer.changes)} change(s) for tenant {tenant!r}{tail}; nothing was written")
        return
    out.print(f"applied {len(answer.seqs)} change(s) for tenant {tenant!r}{tail}")


async def _apply_here(nc: Any, tenant: str, loaded: LoadedCatalog, plugins: PluginSpecs, by: str | None,
                      dry_run: bool = False) -> CatalogAnswer:
    """The apply without a planner (a bare server, tools, tests): only a connection that may
    append to the log directly (the system identity, an open bus) gets through."""
    store = EventStore(nc)
    state = await read_state(store, tenant)
    check = check_apply(state, loaded.catalog, plugins, loaded.sources, log_label=f"catalog of tenant {tenant!r} in the log")
    problems = [problem_json(p) for p in check.errors + check.warnings]
    if dry_run:
        return CatalogAnswer(ok=check.ok, dry_run=True, changes=[c.to_json() for c in check.changes], problems=problems)
    if not check.ok:
        return CatalogAnswer(ok=False, problems=problems)
    seqs = await append_changes(store, tenant, check.changes, state.last_seq, _writer(nc, by))
    return CatalogAnswer(ok=True, changes=[c.to_json() for c in check.changes], seqs=seqs, problems=problems)


def _problem_of(p: CatalogProblem) -> Problem:
    return Problem(p.kind, p.entity, p.field, p.message, p.severity, p.file)


def _print_changes(changes: Sequence[dict[str, Any]]) -> None:
    for c in changes:
        label = KIND_LABEL[c["kind"]]
        if c["action"] == "add":
            out.print(f"+ {label} {c['name']} (v{c['version']})")
        else:
            out.print(f"~ {label} {c['name']} (v{c['version']}): {', '.join(c['fields'])}")


UNNAMED = "the token's principal"
"""Who reads, in a message, when no token names them."""


@catalog.command("diff")
@click.argument("paths", nargs=-1, required=True, type=FilePath(path_type=Path))
@bus_options
@_plugins_option
@json_option
@command
async def diff(paths: tuple[Path, ...], bus: Bus, plugins_dir: tuple[Path, ...], as_json: bool) -> None:
    """What `apply` would change, and whether it would be accepted; writes nothing."""
    plugins = _specs(plugins_dir)
    loaded = _load(paths, "nothing was compared with the catalog")  # (a diff never applies)
    async with TrackerReads(bus) as tracker:
        state, tenant, complete = await _read_catalog(tracker)
    if not complete:
        raise CliError(f"diff checks the whole catalog, and {tracker.principal or UNNAMED} may read "
                       f"only part of it: it needs read on catalog:* (or the tenant) of tenant {tenant}", EXIT_DENIED)
    check = check_apply(state, loaded.catalog, plugins, loaded.sources, log_label=f"catalog of tenant {tenant!r} in the log")
    if as_json:
        echo_json({"changes": [c.to_json() for c in check.changes], "valid": check.ok,
                   "problems": [_problem_json(p) for p in [*loaded.problems, *check.errors, *check.warnings]]})
    else:
        _print_problems(check.errors + check.warnings)
        _print_changes([c.to_json() for c in check.changes])
        unchanged = loaded.count - len(check.changes)
        verdict = "apply would be accepted" if check.ok else f"apply would be refused ({len(check.errors)} error(s))"
        out.print(f"{len(check.changes)} change(s), {unchanged} unchanged; {verdict}")
    if not check.ok:
        raise CliError(f"{len(check.errors)} error(s): apply would be refused", EXIT_INVALID)


@catalog.command("get")
@click.argument("kind", cls=KindArgument)
@click.argument("name", required=False)
@bus_options
@click.option("--resolved", is_flag=True, help="a cluster template with its extends/includes merged in")
@json_option
@command
async def get(kind: str, name: str | None, bus: Bus, resolved: bool, as_json: bool) -> None:
    """List the entities of KIND, or show one (sensitive provider fields are masked)."""
    if name is None and kind.partition("/")[2] and kind_of(kind.partition("/")[0]) is not None:  # KIND/NAME, as a scope names one
        kind, _, name = kind.partition("/")
    k = _kind(kind)
    async with TrackerReads(bus) as tracker:
        state, tenant, complete = await _read_catalog(tracker)
    catalog: Catalog = state.catalog  # secrets masked by the tracker
    entities = catalog.entities(k)
    if name is None:
        rows = [{"name": n, "version": state.versions.get((k, n), 1), "description": e.description}
                for n, e in sorted(entities.items())]
        if as_json:
            echo_json(rows)
            return
        if rows:
            print_rows(f"{KIND_LABEL[k]}s of tenant {tenant!r}", ["name", "version", "description"],
                       [[r["name"], str(r["version"]), r["description"]] for r in rows], out, heading=True)
        else:  # an empty table read as "the catalog is empty" where the reader may see none of it
            out.print(f"no {KIND_LABEL[k]}s in the catalog of tenant {tenant!r}" + ("" if complete else " that you may read"))
        if not complete:
            creates = "; a cluster is made only from a template its creator may read" if k == "clustertemplates" else ""
            who = tracker.principal  # named, as every other refusal names its reader (it said PRINCIPAL to bob)
            err.print(f"note: {who or UNNAMED} may read only part of the catalog of tenant {tenant!r}: "
                      f"the rest needs read on catalog:{k}/<name> or catalog:* (a tenant admin can give it: muster grant "
                      f"{who or 'PRINCIPAL'} read --scope 'catalog:*'; docs/security.md){creates}")
        return
    if name not in entities:
        raise CliError(f"no {KIND_LABEL[k]} {name!r} in the catalog of tenant {tenant!r} (or none you may read)")
    entity: Any = entities[name]
    if resolved:
        if k != "clustertemplates":
            raise CliError("--resolved applies to cluster templates only")
        try:
            entity = resolve_template(catalog, name)
        except TemplateError as e:
            raise CliError(str(e)) from None
    body = entity.model_dump(mode="json", exclude_defaults=not as_json)
    body["version"] = state.versions.get((k, name), 1)
    click.echo(json.dumps(body) if as_json else json.dumps(body, indent=2))


async def _read_catalog(tracker: TrackerReads) -> tuple[CatalogState, str, bool]:
    """The tenant's catalog as the tracker shows it (secrets masked, the entities the token's
    principal may read), its tenant, and whether it is whole."""
    body = await tracker.get("/v1/catalog")
    state = CatalogState(Catalog.model_validate(body["catalog"]), body["last_seq"],
                         {(v["kind"], v["name"]): v["version"] for v in body["versions"]})
    return state, str(body.get("tenant") or tracker.tenant or ""), bool(body["complete"])


@catalog.command("delete")
@click.argument("kind_word", metavar="KIND", cls=KindArgument, example="services NAME")
@click.argument("name")
@bus_options
@_plugins_option
@click.option("--by", default=None, help="who is deleting, without a token (with one, the log records its principal)")
@json_option
@command
async def delete(kind_word: str, name: str, bus: Bus, plugins_dir: tuple[Path, ...], by: str | None, as_json: bool) -> None:
    """Delete NAME of KIND from the catalog; refused, with every reason, while a template or a
    live cluster uses it."""
    kind = _kind(kind_word)
    request = DeleteCatalogEntity(kind=kind, name=name, requested_by=by or default_user())  # (a name no entity has: before the bus)
    async with await open_client(bus) as client:
        tenant = client.tenant
        answer = await client.refusals.guard(ask_planner(client.nc, tenant, request), principal_of(client.nc), tenant)
        if answer is None:  # no planner: delete it ourselves (the right to is the bus's to give)
            try:
                answer = CatalogAnswer(ok=True, seqs=[await delete_entity(EventStore(client.nc), tenant, kind, name, _writer(client.nc, by),
                                                                          _specs(plugins_dir))])
            except NotInCatalog:
                raise
            except DeleteRefused as e:
                answer = CatalogAnswer(ok=False, reasons=e.reasons)
    if not answer.ok:
        if as_json:
            echo_json({"deleted": False, "kind": kind, "name": name, "reasons": answer.reasons})
        else:
            for reason in answer.reasons:
                err.print(f"[red]in use[/red]: {escape(reason)}", markup=True, highlight=False)
        raise DeleteRefused(kind, name, answer.reasons)
    seq = answer.seqs[0]
    if as_json:
        echo_json({"deleted": True, "kind": kind, "name": name, "seq": seq})
        return
    out.print(f"deleted {KIND_LABEL[kind]} {name!r} from the catalog of tenant {tenant!r} (log seq {seq})")


@catalog.command("history")
@click.argument("name")
@click.option("--kind", "kind_word", default=None, help="only this kind (a name may be used by several kinds)")
@bus_options
@json_option
@command
async def history(name: str, kind_word: str | None, bus: Bus, as_json: bool) -> None:
    """Every version of NAME from the log: when, by whom, which fields changed."""
    k = _kind(kind_word) if kind_word else None
    async with TrackerReads(bus) as tracker:
        rows = (await tracker.get("/v1/catalog/history", name=name, kind=k))["items"]
        tenant = bus.asked or ""
    if as_json:
        for r in rows:
            echo_json(r)
        return
    print_rows(f"history of {name!r}" + (f" (tenant {tenant!r})" if tenant else ""), ["kind", "version", "time", "by", "changed", "seq"],
               [[KIND_LABEL[r["kind"]], f"v{r['version']}", shown_time(r["time"]), r["by"], _changed(r), str(r["seq"])] for r in rows], out)


def _changed(r: dict[str, Any]) -> str:
    return "deleted" if r["deleted"] else "created" if r["version"] == 1 else (", ".join(r["changed"]) or "(same)")
