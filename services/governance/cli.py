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

from contracts import subjects
from contracts.errors import name_fault
from contracts.governance import MAX_APPROVAL_S, MAX_LEASE_WARNING_S, NAME, NAME_RULE, NOTIFICATION_KINDS, GovernanceAnswer
from muster.bus.connect import principal_of
from muster.cli_bus import Bus, Refusals, bus_options, connect_bus, resolved
from muster.cli_support import (
    EXIT_DENIED,
    EXIT_FAILED,
    EXIT_INVALID,
    EXIT_UNREACHABLE,
    CliError,
    Duration,
    FilePath,
    WholeNumber,
    command,
    echo_json,
    guarded,
    json_option,
)
from muster.durations import spoken
from muster.help_group import WholeHelpGroup
from muster.ops_care_cli import seconds
from muster.tables import Output, print_rows
from muster.times import shown_time

from .domain import stored
from .domain.deliveries import said
from .domain.policies import PolicySource
from .domain.references import absent_inputs
from .sandbox import POLICY_DEADLINE_S, PolicySandbox

out = Output(highlight=False, soft_wrap=True, markup=False)
TIMEOUT_S = 30.0


def bounded(text: str, option: str, most: float, least: float = 0.0) -> float:
    """A duration option (`seconds`) within its bounds, refused in the words typed: the service's
    answer named the field in seconds (`expires_after_s: 34560000.0 is over the limit: at most
    2592000.0` for `--expires 400d`; session 32)."""
    value = seconds(text, option)
    if value <= 0 or value < least or value > most:
        floor = f"at least {spoken(least)}" if least else "more than 0"
        raise click.UsageError(f"{option} {text}: {floor} and at most {spoken(most)}")
    return value


async def ask(bus: Bus, verb: str, kind: str, as_json: bool = False, said: str = "", **body: Any) -> GovernanceAnswer:
    return (await ask_in(bus, verb, kind, as_json, said, **body))[1]


async def ask_in(bus: Bus, verb: str, kind: str, as_json: bool = False, said: str = "", **body: Any) -> tuple[str, GovernanceAnswer]:
    """The governance service's answer, asked in the tenant the command names, else the token's
    own (as every other command: a tenant's user types no --tenant), and that tenant. A request
    the bus refuses fails at once, naming what was refused, rather than waiting for an answer.
    `said`: the command as people typed it (`policy apply`), which a refusal names."""
    refusals = Refusals()
    nc = await connect_bus(bus, refusals)
    try:
        tenant = (await resolved(bus, nc)).tenant or "default"
        subject = subjects.governance_request(tenant, principal_of(nc), verb)
        try:
            msg = await refusals.guard(nc.request(subject, json.dumps({"kind": kind, **body}).encode(), timeout=TIMEOUT_S),
                                       principal_of(nc), tenant)
        except nats.errors.NoRespondersError:  # (the notifier answers `notify-*`, the governance service the others)
            service = "notifier" if verb.startswith("notify-") else "governance"
            raise CliError(f"no {service} service answered: is `muster up` (or `muster {service}`) running?",
                           EXIT_UNREACHABLE) from None
    finally:
        await nc.close()
    answer = GovernanceAnswer.model_validate_json(msg.data)
    if not answer.ok:
        raise refusal(said or f"{kind} {verb}", answer, as_json)
    return tenant, answer


def refusal(verb: str, answer: GovernanceAnswer, as_json: bool) -> CliError:
    """A refusal as the other commands report one: a sentence on stderr (the answer as JSON on
    stdout with --json), exit 4 when the requester's rights refused it."""
    said = "failed" if answer.code == "unavailable" else "refused"
    code = {"forbidden": EXIT_DENIED, "unavailable": EXIT_FAILED}.get(answer.code or "", EXIT_INVALID)
    return CliError("\n  ".join([f"{verb} {said}: {answer.reason}", *answer.problems]), code,
                    answer.model_dump(mode="json") if as_json else None)


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
    for warning in answer.warnings:
        out.print(f"warning: {warning}")


def listed(title: str, columns: list[str], rows: list[list[str]], none: str) -> None:
    """A tenant's entities, or a sentence saying it has none and what that means (as `muster
    cluster list` says `no clusters`): a bare header read as a failed listing."""
    if rows:
        print_rows(title, columns, rows)
    else:
        out.print(none)


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise CliError(f"{path}: not UTF-8 text (byte {err.start}): a policy and its input are text files", EXIT_INVALID) from None


def _name(path: Path, given: str | None = None) -> str:
    """The policy's name: `--name`, else the file's without `.rego`. One that is not a name is
    refused, saying what a name is: `Bad-Name!.rego` was stored as `Bad-Name-` (and two files
    whose names differ in a `!` and a `?` as one policy), which `policy delete Bad-Name!` then
    could not find. The governance service refuses it in the same words (HTTP, the bus)."""
    name = given if given is not None else path.stem
    if not re.fullmatch(NAME, name):
        shown = name if len(name) <= 40 else name[:37] + "..."
        why = (f"--name {shown!r}" if given is not None
               else f"{path}: its name {shown!r} (the file's, without .rego)")
        raise CliError(f"{why} is not a policy name: use {NAME_RULE} ({name_fault(name, NAME)})"
                       + ("" if given is not None else "; rename the file, or give the policy a name with --name"),
                       EXIT_INVALID)
    return name


# -- muster policy ----------------------------------------------------------------------------------


@click.group("policy", cls=WholeHelpGroup)
def policy() -> None:
    """Rego policies evaluated on every request, its layout, its plan and its cost (docs/governance.md)."""


@policy.command("apply")
@click.argument("files", nargs=-1, required=True, type=FilePath(exists=True, dir_okay=False, path_type=Path))
@click.option("--description", default="", help="what the policies are for (default: the first sentence of each file's leading comment)")
@click.option("--name", "given_name", default=None, metavar="NAME",
              help=f"the policy's name, with one FILE (default: the file's name without .rego); {NAME_RULE}")
@json_option
@bus_options
@command
async def policy_apply(files: tuple[Path, ...], description: str, given_name: str | None, as_json: bool, bus: Bus) -> None:
    """Apply Rego FILES, all or none: each a policy named after its file (`nodes.rego`: `nodes`),
    or --name. A name is 1 to 64 letters, digits, '-' and '_': a file named otherwise is refused."""
    if given_name is not None and len(files) > 1:
        raise click.UsageError("--name names one policy: give one FILE with it")
    entities = [{"name": _name(f, given_name), "source": _text(f), "description": description or first_comment(_text(f))}
                for f in files]
    report(await ask(bus, "put", "policy", as_json, "policy apply", entities=entities), as_json, "policy apply")


def first_comment(source: str) -> str:
    """The first sentence of a Rego file's leading comment (examples/policies/ each say what they
    do there): `policy list` showed an empty description for every policy applied without one,
    then the first line only, cut mid-sentence where the sentence went on (`freeze_window`:
    "... looking (check) and")."""
    said: list[str] = []
    for line in source.splitlines():
        stripped = line.strip()
        if not stripped.startswith("#"):
            if stripped or said:
                break
            continue
        said.append(stripped.lstrip("#").strip())
        if said[-1].endswith("."):
            break
    text = " ".join(w for w in said if w)
    end = text.find(". ")
    return (text[:end + 1] if end >= 0 else text)[:200]


@policy.command("list")
@click.option("--source", is_flag=True, help="print each policy's Rego source too")
@json_option
@bus_options
@command
async def policy_list(source: bool, as_json: bool, bus: Bus) -> None:
    """The tenant's policies. One that fails a check `policy apply` makes now (applied before
    it) denies every operation it judges: a warning on stderr says which check, and how to end it."""
    tenant, answer = await ask_in(bus, "list", "policy", as_json, "policy list")
    # A policy applied before a check of `policy apply` denies every operation (fail closed,
    # `stored.compile_all`): its author is told here too, where the tenant's policies are read.
    failing = stored.listed_warnings(answer.items)
    if as_json:  # with the warnings a script reads
        echo_json(answer.model_copy(update={"warnings": [*answer.warnings, *failing]}).model_dump(mode="json"))
        return
    listed(f"policies of tenant {tenant}", ["name", "version", "by", "updated", "description"],
           [[i["name"], str(i["version"]), i["by"], shown_time(i["updated_at"]), i["entity"].get("description", "")] for i in answer.items],
           f"no policies in tenant {tenant}: no request is refused or warned of by one (`muster policy apply FILE.rego`)")
    for i in answer.items if source else []:
        out.print(f"\n# {i['name']} (version {i['version']})\n{i['entity']['source']}")
    for warning in failing:
        click.echo(f"warning: {warning}", err=True)


@policy.command("delete")
@click.argument("name")
@json_option
@bus_options
@command
async def policy_delete(name: str, as_json: bool, bus: Bus) -> None:
    """Delete policy NAME."""
    report(await ask(bus, "delete", "policy", as_json, "policy delete", name=name), as_json, "policy delete")


def policy_input(document: Any, where: Path) -> dict[str, Any]:
    """The input document, or the one a dry run's answer carries (`--dry-run --json`: its
    `policy.input`, what the tenant's policies were evaluated on). Anything but an object is
    refused: evaluated as an empty input, a list or an empty file read as "allowed"."""
    if not isinstance(document, dict):
        what = "an empty file" if document is None else f"a {type(document).__name__}"
        raise CliError(f"{where}: the input is {what}; it must be a JSON or YAML object: the input document "
                       "(docs/governance.md) or a dry run's answer (`--dry-run --json`)", EXIT_INVALID)
    shown = document.get("policy")
    return shown["input"] if isinstance(shown, dict) and isinstance(shown.get("input"), dict) else document


@policy.command("test")
@click.argument("file", type=FilePath(exists=True, dir_okay=False, path_type=Path))
@click.option("--input", "input_file", required=True, type=FilePath(exists=True, dir_okay=False, path_type=Path),
              help="the input document (JSON or YAML): request, cluster, layout, plan, cost... (docs/governance.md), or a "
                   "dry run's answer (`muster cluster ... --dry-run --json`), which carries it")
@click.option("--deadline", default=POLICY_DEADLINE_S, show_default=True, type=Duration(0.1, 60.0),
              help="seconds the policy may evaluate, as the planner's --policy-deadline")
@json_option
@guarded
def policy_test(file: Path, input_file: Path, deadline: float, as_json: bool) -> None:
    """Evaluate the policy in FILE on an input, here (no bus): exit 0 if allowed, 1 if denied; 2
    if `muster policy apply` would refuse it (a compile error, a local declared twice, a name
    nothing binds, and the other checks of apply: each with its line)."""
    source = _text(file)
    compiled, found = stored.problems(file.stem, source)  # named as the file: nothing is stored
    if compiled is None:  # as `policy apply` refuses it
        raise CliError("\n  ".join([f"{file}: refused, as `muster policy apply` would refuse it", *found]), EXIT_INVALID)
    try:
        document = yaml.safe_load(_text(input_file))
    except yaml.YAMLError as err:
        raise CliError(f"{input_file}: not JSON or YAML: {err}", EXIT_INVALID) from None
    given = policy_input(document, input_file)
    absent = absent_inputs(source, given)  # a rule on them never holds here: "allowed" would mislead unsaid
    for gap in absent:
        click.echo(f"note: {gap}: a rule reading it never holds on this input (the input document: docs/governance.md; "
                   "or a dry run's answer, `--dry-run --json`)", err=True)
    # As the planner evaluates it: in a child process, within the same deadline.
    sandbox = PolicySandbox(deadline, prints=True)  # an author's print() on its own terminal
    try:
        verdict = sandbox.evaluate_now([PolicySource(file.stem, 0, source)], given)
    finally:
        sandbox.close()
    if as_json:
        echo_json({"allowed": not verdict.denied, "deny": [d.message for d in verdict.denials],
                   "warn": [w.message for w in verdict.warnings], "absent": absent})
    else:
        for d in verdict.denials:
            out.print(f"deny: {d.message}")
        for w in verdict.warnings:
            out.print(f"warn: {w.message}")
        out.print("denied" if verdict.denied else "allowed")
    if verdict.denied:
        sys.exit(EXIT_FAILED)


# -- muster rule --------------------------------------------------------------------------------


@click.group("rule", cls=WholeHelpGroup)
def rule() -> None:
    """Approval rules: requests they match wait for an approver (`muster job approve|reject`)."""


@rule.command("add")
@click.argument("name")
@click.option("--operation", "-o", "operations", multiple=True, help="an operation verb (create, delete...); repeat; default: any")
@click.option("--min-nodes", type=WholeNumber(1), default=None, help="the cluster has at least this many nodes once done")
@click.option("--cluster", "clusters", multiple=True, help="cluster names (shell patterns: prod-*); repeat")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="a cluster label that must be set so; repeat")
@click.option("--allow-self-approval", is_flag=True, help="the requester may approve its own job")
@click.option("--expires", default="24h", show_default=True, help="a job not approved within this long is refused")
@click.option("--description", default="", help="what the rule is for (kept with it: `rule list --json` shows it)")
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
              "expires_after_s": bounded(expires, "--expires", MAX_APPROVAL_S), "description": description}
    report(await ask(bus, "put", "rule", as_json, "rule add", entities=[entity]), as_json, "rule add")


@rule.command("list")
@json_option
@bus_options
@command
async def rule_list(as_json: bool, bus: Bus) -> None:
    """The tenant's approval rules."""
    tenant, answer = await ask_in(bus, "list", "rule", as_json, "rule list")
    if as_json:
        echo_json(answer.model_dump(mode="json"))
        return

    def when(e: dict[str, Any]) -> str:
        parts = [f"operations {','.join(e['operations'])}" if e["operations"] else "any operation"]
        parts += [f">= {e['min_nodes']} nodes"] if e.get("min_nodes") else []
        parts += [f"clusters {','.join(e['clusters'])}"] if e["clusters"] else []
        parts += [",".join(f"{k}={v}" for k, v in e["labels"].items())] if e["labels"] else []
        return "; ".join(parts)

    listed(f"approval rules of tenant {tenant}", ["name", "matches", "expires after", "self-approval", "by"],
           [[i["name"], when(i["entity"]), spoken(i["entity"]["expires_after_s"]), "yes" if i["entity"]["allow_self_approval"] else "no",
             i["by"]] for i in answer.items],
           f"no approval rules in tenant {tenant}: no request waits for an approver (`muster rule add`)")


@rule.command("delete")
@click.argument("name")
@json_option
@bus_options
@command
async def rule_delete(name: str, as_json: bool, bus: Bus) -> None:
    """Delete approval rule NAME."""
    report(await ask(bus, "delete", "rule", as_json, "rule delete", name=name), as_json, "rule delete")


# -- muster notify ------------------------------------------------------------------------------


@click.group("notify", cls=WholeHelpGroup)
def notify() -> None:
    """Notification subscriptions: webhooks (signed) and bus subjects (docs/governance.md)."""


@notify.command("add")
@click.argument("name")
@click.option("--on", "events", required=True, help=f"comma-separated: {', '.join(NOTIFICATION_KINDS)}")
@click.option("--webhook", default=None, metavar="URL|secret://NAME",
              help="POST each notification here, signed; secret://NAME: the URL is in the notifier's secrets file")
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
    """Subscribe NAME to job and cluster news: a webhook (--webhook and --secret) or a bus subject (--subject).
    The notifier checks it first: a secret it lacks, or a webhook to an address its operator does not allow, is refused."""
    if (webhook is None) == (subject is None):
        raise click.UsageError("give one of --webhook URL (with --secret secret://NAME) and --subject muster.cb.<tenant>.…")
    if webhook is not None and not secret:
        raise click.UsageError("--webhook needs --secret secret://NAME: the key the notifier signs each delivery with, "
                               "named in its secrets file (docs/governance.md)")
    if subject is not None and (secret or slack):
        raise click.UsageError(f"{'--secret' if secret else '--slack'} is for a webhook: a --subject message is not signed "
                               "and carries the muster body")
    kinds = list(dict.fromkeys(e.strip() for e in events.split(",") if e.strip()))
    unknown = [k for k in kinds if k not in NOTIFICATION_KINDS]
    if unknown or not kinds:  # in the words typed: the service's answer named `events.0` and listed them with 'or'
        what = f"{', '.join(map(repr, unknown))} {'is' if len(unknown) == 1 else 'are'} not a kind of notification" \
            if unknown else "it names no kind of notification"
        raise click.UsageError(f"--on {events!r}: {what}; give one or more of {', '.join(NOTIFICATION_KINDS)}, comma-separated")
    warning = bounded(lease_warning, "--lease-warning", MAX_LEASE_WARNING_S)
    entity: dict[str, Any] = {"name": name, "events": kinds, "clusters": list(clusters), "lease_warning_s": warning}
    if webhook is not None:
        entity["webhook"] = {"url": webhook, "secret": secret, "format": "slack" if slack else "muster"}
    if subject is not None:
        entity["subject"] = subject
    report(await ask(bus, "put", "subscription", as_json, "notify add", entities=[entity]), as_json, "notify add")


@notify.command("list")
@json_option
@bus_options
@command
async def notify_list(as_json: bool, bus: Bus) -> None:
    """The tenant's subscriptions."""
    tenant, answer = await ask_in(bus, "list", "subscription", as_json, "notify list")
    if as_json:
        echo_json(answer.model_dump(mode="json"))
        return
    listed(f"subscriptions of tenant {tenant}", ["name", "on", "to", "clusters", "by", "last delivery"],
           [[i["name"], _on(i["entity"]), i["entity"]["subject"] or
             f"{(i['entity']['webhook'] or {}).get('url', '')} ({(i['entity']['webhook'] or {}).get('format')})",
             ", ".join(i["entity"].get("clusters") or []) or "any", i["by"], said(i.get("delivery"))] for i in answer.items],
           f"no subscriptions in tenant {tenant}: nothing is notified (`muster notify add`)")


def _on(entity: dict[str, Any]) -> str:
    events = ", ".join(entity["events"])
    warning = entity.get("lease_warning_s")
    return f"{events} ({spoken(warning)} before a lease ends)" if "lease_expiring" in entity["events"] and warning else events




@notify.command("remove")
@click.argument("name")
@json_option
@bus_options
@command
async def notify_remove(name: str, as_json: bool, bus: Bus) -> None:
    """Remove subscription NAME."""
    report(await ask(bus, "delete", "subscription", as_json, "notify remove", name=name), as_json, "notify remove")


@notify.command("test")
@click.argument("name")
@json_option
@bus_options
@command
async def notify_test(name: str, as_json: bool, bus: Bus) -> None:
    """Send subscription NAME a test notification now (recorded like any other)."""
    answer = await ask(bus, "notify-test", "subscription", as_json, "notify test", name=name)
    if as_json:
        echo_json(answer.model_dump(mode="json"))
    else:
        status = answer.items[0].get("status") if answer.items else None
        out.print(f"test notification delivered to {name}" + (f" (HTTP {status})" if status else ""))
