"""`muster schedule create|list|pause|resume|delete`: operations sent at set times, as their
owner (docs/governance.md).

`create` builds the request with the very command typed after `--` (nothing is sent then) and keeps
it in the schedule; the governance service's scheduler sends it at every tick."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click

from contracts.commands import VERB_OF
from contracts.governance import MAX_EVERY_S, Schedule, ran_text
from muster.cli_bus import Bus, bus_options
from muster.cli_support import CliError, command, echo_json, guarded, json_option, run
from muster.help_group import WholeHelpGroup
from muster.times import shown_time

from .cli import ask, ask_in, bounded, listed, out, report
from .domain.operation_text import operation_text
from .domain.schedules import listed_due, typed

# -- muster schedule ----------------------------------------------------------------------------


@click.group("schedule", cls=WholeHelpGroup)
def schedule() -> None:
    """Operations sent at set times, as their owner: `schedule create NAME --cron '0 3 * * *' -- cluster check c1`."""


def _captured(words: tuple[str, ...], bus: Bus) -> tuple[str, dict[str, Any]]:
    """The request the muster command in `words` would send (its verb and command), built by
    that very command, with nothing sent."""
    from muster.cli import main
    from muster.ops_session import CAPTURE, is_operation, operation_command

    if not words:
        raise CliError("give the operation after `--`, as you would type it: -- cluster check c1")
    named = operation_command(main, words)
    if named is not None and not is_operation(named):
        # Run to be captured, any other command did what it does: `-- schedule create y ...`
        # wrote schedule y, `-- rule delete big` would have deleted the rule (session 32).
        raise CliError(f"`{' '.join(words)}` is not an operation muster can schedule (cluster ..., job ...: a request "
                       "that makes a job); nothing was run")
    if "--wait" in words:  # (a check's --wait printed the cluster's last drift as if it had been checked)
        raise CliError(f"`{' '.join(words)}`: leave --wait out: a tick does not wait for its job (`muster schedule list` "
                       "shows each run's job; `muster job wait JOB` follows one)")
    captured: list[Any] = []
    token = CAPTURE.set(captured)
    # The tenant only if the user named one: else the command resolves the token's own, as typed.
    given = {"--tenant": bus.asked, "--data-dir": str(bus.data_dir), "--nats-url": bus.explicit_url}
    extra = [w for option, value in given.items() if value and option not in words for w in (option, value)]
    try:
        main.main(args=[*words, *extra], standalone_mode=False)
    except click.ClickException as err:  # its own exit code: a refusal of the requester's rights stays a 4
        raise CliError(f"`{' '.join(words)}`: {err.format_message()}", err.exit_code) from None
    finally:
        CAPTURE.reset(token)
    if len(captured) != 1:
        raise CliError(f"`{' '.join(words)}` is not an operation muster can schedule (cluster ..., job ...)")
    cmd = captured[0]
    if getattr(cmd, "dry_run", False):
        # The schedule kept the operation without its dry_run: `-- cluster delete web --dry-run`
        # made a schedule that deleted the cluster at its first tick (session 32).
        raise CliError(f"`{' '.join(words)}` is a dry run: it previews and changes nothing, and a schedule sends its "
                       "operation for real at every tick; leave --dry-run out to schedule the operation, or run the "
                       "dry run now, unscheduled")
    body = cmd.model_dump(mode="json", exclude={"request_id", "requested_by", "dry_run"})
    return VERB_OF[cmd.type], body


@schedule.command("create", context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.option("--cron", default=None, help="5 fields, minute first ('0 3 * * *'), or 6, second first")
@click.option("--every", default=None, help="or a tick every DURATION (90s, 15m, 2h)")
@click.option("--tz", "timezone", default="UTC", show_default=True, help="the cron's time zone (an IANA name)")
@click.option("--missed", type=click.Choice(["once", "skip"]), default="once", show_default=True,
              help="ticks missed while no scheduler ran: run the latest once, or none")
@click.argument("operation", nargs=-1, type=click.UNPROCESSED)
@json_option
@bus_options
@guarded
def schedule_create(name: str, cron: str | None, every: str | None, timezone: str, missed: str, operation: tuple[str, ...],
                    as_json: bool, bus: Bus) -> None:
    """Send OPERATION (a muster command, after `--`) at every tick, as you."""
    if cron is not None and every is not None:  # ("give one of" read as "at least one" to who gave both)
        raise CliError("--cron and --every both given: a schedule has one of them, either a cron or an interval")
    if cron is None and every is None:
        raise CliError("when does it run? give --cron '0 3 * * *' (a cron expression) or --every 10m (an interval)")
    every_s = bounded(every, "--every", MAX_EVERY_S, least=1) if every else None  # (before the operation is resolved)
    verb, body = _captured(operation, bus)
    entity = {"name": name, "cron": cron, "every_s": every_s, "timezone": timezone,
              "missed": missed, "verb": verb, "command": body, "text": " ".join(operation)}
    report(run(ask(bus, "put", "schedule", as_json, "schedule create", entities=[entity])), as_json, "schedule create")


def _when(entity: dict[str, Any]) -> str:
    try:
        return typed(Schedule.model_validate(entity))
    except ValueError:  # as the console: a schedule no longer read by this version is listed, not a crash
        return "?"


def _next(entity: dict[str, Any], item: dict[str, Any]) -> str:
    if item.get("ended"):
        return f"ended: {item['ended']}"
    if entity.get("paused"):
        return "paused"
    s = Schedule.model_validate(entity)
    return shown_time(listed_due(s, item, datetime.now(UTC)).next_at)


@schedule.command("list")
@json_option
@bus_options
@command
async def schedule_list(as_json: bool, bus: Bus) -> None:
    """The tenant's schedules, their last runs and next ticks (or why they ended)."""
    tenant, answer = await ask_in(bus, "list", "schedule", as_json, "schedule list")
    if as_json:
        echo_json(answer.model_dump(mode="json"))
        return
    rows = []
    for i in answer.items:
        e = i["entity"]
        last = i["runs"][-1] if i["runs"] else None
        ran = "" if last is None else f"{shown_time(last['tick'])}: " + ran_text(last["job_id"], last["rejected"], last.get("done", ""))
        rows.append([i["name"], _when(e), e.get("text") or operation_text(e["verb"], e["command"]), e.get("owner", ""),
                     ran, _next(e, i)])
    some = " you may see" if answer.warnings else ""  # (without `read` on the tenant: those one owns or may run)
    listed(f"schedules of tenant {tenant}", ["name", "when", "operation", "owner", "last run", "next"], rows,
           f"no schedules{some} in tenant {tenant} (`muster schedule create NAME --cron '0 3 * * *' -- cluster check CLUSTER`)")
    for warning in answer.warnings:
        out.print(f"note: {warning}")


def _toggle(name: str, paused: bool) -> Any:
    @bus_options
    @json_option
    @command
    async def change(as_json: bool, bus: Bus, **kwargs: Any) -> None:
        # By name: the service reads the schedule, so its owner needs no `read` on the tenant
        # (it did when this command listed the schedule to put it back; docs/governance.md).
        said = f"schedule {name}"
        report(await ask(bus, name, "schedule", as_json, said, name=kwargs["name"]), as_json, said)

    change.__doc__ = f"{'Pause' if paused else 'Resume'} schedule NAME (its owner, or who may run its operation)."
    return schedule.command(name)(click.argument("name")(change))


_toggle("pause", True)
_toggle("resume", False)


@schedule.command("delete")
@click.argument("name")
@json_option
@bus_options
@command
async def schedule_delete(name: str, as_json: bool, bus: Bus) -> None:
    """Delete schedule NAME (a tick already taken still runs)."""
    report(await ask(bus, "delete", "schedule", as_json, "schedule delete", name=name), as_json, "schedule delete")
