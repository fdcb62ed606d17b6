"""`muster policy|rule|notify|schedule`: governance for people (docs/governance.md).

Every change is a request to the governance service (`muster.gov.<tenant>.<principal>.<verb>`),
which checks the requester's rights and records it with the requester as `by`; `muster policy
test` runs a policy here, on an input file, without a bus.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import click
import nats.errors
import yaml
from rich.console import Console
from rich.table import Table

from contracts import subjects
from contracts.commands import VERB_OF
from contracts.governance import NOTIFICATION_KINDS, GovernanceAnswer
from muster.bus.connect import principal_of
from muster.cli_bus import Bus, bus_options, open_nats
from muster.cli_support import EXIT_FAILED, EXIT_INVALID, EXIT_UNREACHABLE, CliError, command, echo_json, guarded, json_option
from muster.ops_care_cli import seconds

from .domain.policies import PolicyCompileError, compile_policy, evaluate

out = Console(highlight=False, soft_wrap=True)
TIMEOUT_S = 30.0


async def ask(bus: Bus, verb: str, kind: str, **body: Any) -> GovernanceAnswer:
    async with open_nats(bus) as nc:
        subject = subjects.governance_request(bus.tenant, principal_of(nc), verb)
        try:
            msg = await nc.request(subject, json.dumps({"kind": kind, **body}).encode(), timeout=TIMEOUT_S)
        except nats.errors.NoRespondersError:
            raise CliError("no governance service answered: is `muster up` (or `muster governance`) running?", EXIT_UNREACHABLE) from None
    answer = GovernanceAnswer.model_validate_json(msg.data)
    if not answer.ok:
        raise CliError("\n  ".join([f"{verb} refused: {answer.reason}", *answer.problems]), EXIT_INVALID, answer.model_dump())
    return answer


def report(answer: GovernanceAnswer, as_json: bool, what: str) -> None:
    if as_json:
        echo_json(answer.model_dump(mode="json"))
        return
    if not answer.items:
        out.print(f"{what}: nothing changed (the log has it so already)")
    for item in answer.items:
        if item.get("deleted"):
            out.print(f"{item['kind']} {item['name']} deleted")
        else:
            out.print(f"{item['kind']} {item['name']}: version {item['version']} ({item['action']})")


def table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    t = Table(title=title)
    for c in columns:
        t.add_column(c)
    for r in rows:
        t.add_row(*r)
    out.print(t)


def _name(path: Path) -> str:
    return re.sub(r"[^A-Za-z0-9_\-]", "-", path.stem)[:64]


# -- muster policy ----------------------------------------------------------------------------------


@click.group("policy")
def policy() -> None:
    """Rego policies evaluated on every request, its layout, its plan and its cost (docs/governance.md)."""


@policy.command("apply")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--description", default="", help="what the policies are for")
@json_option
@bus_options
@command
async def policy_apply(files: tuple[Path, ...], description: str, as_json: bool, bus: Bus) -> None:
    """Apply Rego FILES (each a policy named after its file), all or none."""
    entities = [{"name": _name(f), "source": f.read_text(), "description": description} for f in files]
    report(await ask(bus, "put", "policy", entities=entities), as_json, "policy apply")


@policy.command("list")
@click.option("--source", is_flag=True, help="print each policy's Rego source too")
@json_option
@bus_options
@command
async def policy_list(source: bool, as_json: bool, bus: Bus) -> None:
    """The tenant's policies."""
    answer = await ask(bus, "list", "policy")
    if as_json:
        echo_json(answer.model_dump(mode="json"))
        return
    table(f"policies of tenant {bus.tenant}", ["name", "version", "by", "updated", "description"],
          [[i["name"], str(i["version"]), i["by"], i["updated_at"][:19], i["entity"].get("description", "")] for i in answer.items])
    for i in answer.items if source else []:
        out.print(f"\n# {i['name']} (version {i['version']})\n{i['entity']['source']}", markup=False)


@policy.command("delete")
@click.argument("name")
@json_option
@bus_options
@command
async def policy_delete(name: str, as_json: bool, bus: Bus) -> None:
    """Delete policy NAME."""
    report(await ask(bus, "delete", "policy", name=name), as_json, "policy delete")


@policy.command("test")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--input", "input_file", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="the input document (JSON or YAML): request, cluster, layout, plan, cost... (docs/governance.md)")
@json_option
@guarded
def policy_test(file: Path, input_file: Path, as_json: bool) -> None:
    """Evaluate the policy in FILE on an input, here (no bus): exit 0 if allowed, 1 if denied."""
    try:
        compiled = compile_policy(_name(file), file.read_text())
    except PolicyCompileError as err:
        raise CliError(f"{file}: {err}", EXIT_INVALID) from None
    try:
        document = yaml.safe_load(input_file.read_text())
    except yaml.YAMLError as err:
        raise CliError(f"{input_file}: not JSON or YAML: {err}", EXIT_INVALID) from None
    verdict = evaluate([compiled], document if isinstance(document, dict) else {})
    if as_json:
        echo_json({"allowed": not verdict.denied, "deny": [d.message for d in verdict.denials],
                   "warn": [w.message for w in verdict.warnings]})
    else:
        for d in verdict.denials:
            out.print(f"deny: {d.message}", markup=False)
        for w in verdict.warnings:
            out.print(f"warn: {w.message}", markup=False)
        out.print("denied" if verdict.denied else "allowed")
    if verdict.denied:
        sys.exit(EXIT_FAILED)


# -- muster rule --------------------------------------------------------------------------------


@click.group("rule")
def rule() -> None:
    """Approval rules: requests they match wait for an approver (`muster job approve|reject`)."""


@rule.command("add")
@click.argument("name")
@click.option("--operation", "-o", "operations", multiple=True, help="an operation verb (create, delete...); repeat; default: any")
@click.option("--min-nodes", type=click.IntRange(1), default=None, help="the cluster has at least this many nodes once done")
@click.option("--cluster", "clusters", multiple=True, help="cluster names (shell patterns: prod-*); repeat")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="a cluster label that must be set so; repeat")
@click.option("--allow-self-approval", is_flag=True, help="the requester may approve its own job")
@click.option("--expires", default="24h", show_default=True, help="a job not approved within this long is refused")
@click.option("--description", default="")
@json_option
@bus_options
@command
async def rule_add(name: str, operations: tuple[str, ...], min_nodes: int | None, clusters: tuple[str, ...],
                   labels: tuple[str, ...], allow_self_approval: bool, expires: str, description: str, as_json: bool, bus: Bus) -> None:
    """Add (or change) approval rule NAME."""
    pairs = [label.partition("=") for label in labels]
    if any(not sep or not key for key, sep, _ in pairs):
        raise CliError("--label takes KEY=VALUE")
    entity = {"name": name, "operations": list(operations), "min_nodes": min_nodes, "clusters": list(clusters),
              "labels": {k: v for k, _, v in pairs}, "allow_self_approval": allow_self_approval,
              "expires_after_s": seconds(expires, "--expires"), "description": description}
    report(await ask(bus, "put", "rule", entities=[entity]), as_json, "rule add")


@rule.command("list")
@json_option
@bus_options
@command
async def rule_list(as_json: bool, bus: Bus) -> None:
    """The tenant's approval rules."""
    answer = await ask(bus, "list", "rule")
    if as_json:
        echo_json(answer.model_dump(mode="json"))
        return

    def when(e: dict[str, Any]) -> str:
        parts = [f"operations {','.join(e['operations'])}" if e["operations"] else "any operation"]
        parts += [f">= {e['min_nodes']} nodes"] if e.get("min_nodes") else []
        parts += [f"clusters {','.join(e['clusters'])}"] if e["clusters"] else []
        parts += [",".join(f"{k}={v}" for k, v in e["labels"].items())] if e["labels"] else []
        return "; ".join(parts)

    table(f"approval rules of tenant {bus.tenant}", ["name", "matches", "expires after", "self-approval", "by"],
          [[i["name"], when(i["entity"]), f"{i['entity']['expires_after_s']:g} s", "yes" if i["entity"]["allow_self_approval"] else "no",
            i["by"]] for i in answer.items])


@rule.command("delete")
@click.argument("name")
@json_option
@bus_options
@command
async def rule_delete(name: str, as_json: bool, bus: Bus) -> None:
    """Delete approval rule NAME."""
    report(await ask(bus, "delete", "rule", name=name), as_json, "rule delete")


# -- muster notify ------------------------------------------------------------------------------


@click.group("notify")
def notify() -> None:
    """Notification subscriptions: webhooks (signed) and bus subjects (docs/governance.md)."""


@notify.command("add")
@click.argument("name")
@click.option("--on", "events", required=True, help=f"comma-separated: {', '.join(NOTIFICATION_KINDS)}")
@click.option("--webhook", default=None, metavar="URL", help="POST each notification here, signed")
@click.option("--secret", default=None, metavar="secret://NAME", help="the webhook's signing key, in the notifier's secrets file")
@click.option("--slack", is_flag=True, help="a body Slack's incoming webhooks take")
@click.option("--subject", default=None, metavar="muster.cb.<tenant>.…", help="publish each notification on this bus subject")
@click.option("--cluster", "clusters", multiple=True, help="only these clusters (ids or name patterns); repeat")
@click.option("--lease-warning", default="1h", show_default=True, help="lease_expiring: this long before the lease ends")
@json_option
@bus_options
@command
async def notify_add(name: str, events: str, webhook: str | None, secret: str | None, slack: bool, subject: str | None,
                     clusters: tuple[str, ...], lease_warning: str, as_json: bool, bus: Bus) -> None:
    """Subscribe NAME to job and cluster news."""
    entity: dict[str, Any] = {"name": name, "events": [e.strip() for e in events.split(",") if e.strip()],
                              "clusters": list(clusters), "lease_warning_s": seconds(lease_warning, "--lease-warning")}
    if webhook:
        entity["webhook"] = {"url": webhook, "secret": secret or "", "format": "slack" if slack else "muster"}
    if subject:
        entity["subject"] = subject
    report(await ask(bus, "put", "subscription", entities=[entity]), as_json, "notify add")


@notify.command("list")
@json_option
@bus_options
@command
async def notify_list(as_json: bool, bus: Bus) -> None:
    """The tenant's subscriptions."""
    answer = await ask(bus, "list", "subscription")
    if as_json:
        echo_json(answer.model_dump(mode="json"))
        return
    table(f"subscriptions of tenant {bus.tenant}", ["name", "on", "to", "by"],
          [[i["name"], ", ".join(i["entity"]["events"]),
            i["entity"]["subject"] or f"{(i['entity']['webhook'] or {}).get('url', '')} ({(i['entity']['webhook'] or {}).get('format')})",
            i["by"]] for i in answer.items])


@notify.command("remove")
@click.argument("name")
@json_option
@bus_options
@command
async def notify_remove(name: str, as_json: bool, bus: Bus) -> None:
    """Remove subscription NAME."""
    report(await ask(bus, "delete", "subscription", name=name), as_json, "notify remove")


@notify.command("test")
@click.argument("name")
@json_option
@bus_options
@command
async def notify_test(name: str, as_json: bool, bus: Bus) -> None:
    """Send subscription NAME a test notification now (recorded like any other)."""
    answer = await ask(bus, "notify-test", "subscription", name=name)
    if as_json:
        echo_json(answer.model_dump(mode="json"))
    else:
        status = answer.items[0].get("status") if answer.items else None
        out.print(f"test notification delivered to {name}" + (f" (HTTP {status})" if status else ""))


# -- muster schedule ----------------------------------------------------------------------------


@click.group("schedule")
def schedule() -> None:
    """Operations sent at set times, as their owner: `schedule create NAME --cron '0 3 * * *' -- cluster check c1`."""


def _captured(words: tuple[str, ...], bus: Bus) -> tuple[str, dict[str, Any]]:
    """The request the muster command in `words` would send (its verb and command), built by
    that very command, with nothing sent."""
    from muster.cli import main
    from muster.ops_session import CAPTURE

    if not words:
        raise CliError("give the operation after `--`, as you would type it: -- cluster check c1")
    captured: list[Any] = []
    token = CAPTURE.set(captured)
    given = {"--tenant": str(bus.tenant), "--data-dir": str(bus.data_dir), "--nats-url": bus.explicit_url}
    extra = [w for option, value in given.items() if value and option not in words for w in (option, value)]
    try:
        main.main(args=[*words, *extra], standalone_mode=False)
    except click.ClickException as err:
        raise CliError(f"`{' '.join(words)}`: {err.format_message()}") from None
    finally:
        CAPTURE.reset(token)
    if len(captured) != 1:
        raise CliError(f"`{' '.join(words)}` is not an operation muster can schedule (cluster ..., job ...)")
    cmd = captured[0]
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
    from muster.cli_support import run

    if (cron is None) == (every is None):
        raise CliError("give one of --cron and --every")
    verb, body = _captured(operation, bus)
    entity = {"name": name, "cron": cron, "every_s": seconds(every, "--every") if every else None, "timezone": timezone,
              "missed": missed, "verb": verb, "command": body, "text": " ".join(operation)}
    report(run(ask(bus, "put", "schedule", entities=[entity])), as_json, "schedule create")


def _next(entity: dict[str, Any], item: dict[str, Any]) -> str:
    from datetime import UTC, datetime

    from contracts.governance import Schedule

    from .domain.schedules import due

    if entity.get("paused"):
        return "paused"
    s = Schedule.model_validate(entity)
    last = datetime.fromisoformat(item["last_tick"]) if item.get("last_tick") else None
    return due(s, last, datetime.fromisoformat(item["created_at"]), datetime.now(UTC)).next_at.isoformat(timespec="seconds")


@schedule.command("list")
@json_option
@bus_options
@command
async def schedule_list(as_json: bool, bus: Bus) -> None:
    """The tenant's schedules, their last runs and next ticks."""
    answer = await ask(bus, "list", "schedule")
    if as_json:
        echo_json(answer.model_dump(mode="json"))
        return
    rows = []
    for i in answer.items:
        e = i["entity"]
        last = i["runs"][-1] if i["runs"] else None
        ran = "" if last is None else f"{last['tick'][:19]}: " + (f"job {last['job_id']}" if last["job_id"] else f"refused: {last['rejected']}")
        rows.append([i["name"], e.get("cron") or f"every {e['every_s']:g} s", e.get("text") or e["verb"], e.get("owner", ""),
                     ran, _next(e, i)])
    table(f"schedules of tenant {bus.tenant}", ["name", "when", "operation", "owner", "last run", "next"], rows)


def _toggle(name: str, paused: bool) -> Any:
    @bus_options
    @json_option
    @command
    async def change(as_json: bool, bus: Bus, **kwargs: Any) -> None:
        items = (await ask(bus, "list", "schedule", name=kwargs["name"])).items
        if not items:
            raise CliError(f"no schedule {kwargs['name']!r} in tenant {bus.tenant!r}")
        entity = {**items[0]["entity"], "paused": paused}
        report(await ask(bus, "put", "schedule", entities=[entity]), as_json, f"schedule {'pause' if paused else 'resume'}")

    change.__doc__ = f"{'Pause' if paused else 'Resume'} schedule NAME."
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
    report(await ask(bus, "delete", "schedule", name=name), as_json, "schedule delete")
