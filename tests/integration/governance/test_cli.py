"""The governance commands as a person types them (`muster rule|policy|notify|schedule`), against
the governance service and the notifier on a real nats-server: each change answered and listed, a
refusal one sentence on stderr with its exit code (the answer as JSON only with --json), a
schedule captured from the command typed after `--`, paused, resumed and deleted."""

from __future__ import annotations

import json
import os
import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import nats.errors
import pytest
import pytest_asyncio
from click.testing import Result

from contracts import subjects
from contracts.governance import GovernancePut
from contracts.records import Append
from muster.bus.connect import connect, principal_of
from muster.bus.eventstore import EventStore
from muster.bus.streams import ensure_streams
from services.governance.entrypoint import start_governance
from services.notifier.entrypoint import start_notifier
from tests import cli_in_process

NODES = """package muster.nodes
import rego.v1

deny contains "too many nodes" if input.request.nodes > 10
"""
BROKEN = "package muster.broken\nimport rego.v1\n\ndeny contains msg if {\n    input.request.nodes >\n    msg := \"x\"\n}\n"


@pytest_asyncio.fixture
async def url(fresh_nats: str) -> AsyncIterator[str]:
    async with AsyncExitStack() as stack:
        for name in ("governance", "notifier"):
            nc = await connect(fresh_nats, name=name)
            stack.push_async_callback(nc.close)
            await ensure_streams(nc.jetstream())
            if name == "governance":
                await start_governance(nc, stack, "governance-cli")
            else:
                await start_notifier(nc, stack, {"ops-hook": "k3y"})
        yield fresh_nats


async def muster(url: str, *args: str) -> Result:
    """A `muster` command as typed, in this process (tests/cli_in_process.py)."""
    return await cli_in_process.ran(args, {**os.environ, "NATS_URL": url}, 60)


def answers(result: Result) -> list[dict[str, Any]]:
    """The command's JSON answers."""
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith('{"type": "GovernanceAnswer"')]


def listed(result: Result) -> list[dict[str, Any]]:
    assert result.exit_code == 0, result.output
    (answer,) = answers(result)
    return list(answer["items"])


async def test_rules_policies_subscriptions_and_schedules_from_the_command_line(url: str, tmp_path: Path) -> None:
    added = await muster(url, "rule", "add", "deletes", "-o", "delete", "--expires", "1h")
    assert added.exit_code == 0 and "rule deletes: version 1 (add)" in added.stdout, added.output
    assert [(i["name"], i["entity"]["expires_after_s"]) for i in listed(await muster(url, "rule", "list", "--json"))] == [
        ("deletes", 3600.0)]

    (tmp_path / "nodes.rego").write_text(NODES)
    (tmp_path / "broken.rego").write_text(BROKEN)
    assert (await muster(url, "policy", "apply", str(tmp_path / "nodes.rego"))).exit_code == 0
    refused = await muster(url, "policy", "apply", str(tmp_path / "broken.rego"))
    assert refused.exit_code == 2 and answers(refused) == [], refused.output  # a sentence on stderr, no JSON
    assert "policy apply refused: nothing written: 1 problem" in refused.stderr and "(line 5)" in refused.stderr
    as_json = await muster(url, "policy", "apply", str(tmp_path / "broken.rego"), "--json")
    assert as_json.exit_code == 2 and [a["code"] for a in answers(as_json)] == ["invalid"]
    assert "too many nodes" in (await muster(url, "policy", "list", "--source")).stdout
    assert " UTC" in (await muster(url, "policy", "list")).stdout  # its time as every list shows one (muster.times)

    made = await muster(url, "notify", "add", "ops", "--on", "job_failed,needs_approval", "--subject", "muster.cb.default.ops")
    assert made.exit_code == 0, made.output
    tested = await muster(url, "notify", "test", "ops")
    assert tested.exit_code == 0 and "test notification delivered to ops" in tested.stdout, tested.output
    missing = await muster(url, "notify", "test", "nobody")
    assert missing.exit_code == 2 and "no subscription 'nobody'" in missing.stderr, missing.output

    # (a create names no existing cluster: no tracker is asked to resolve one here)
    created = await muster(url, "schedule", "create", "nightly", "--cron", "0 3 * * *", "--", "cluster", "create", "web",
                           "-t", "hadoop-small", "-n", "3")
    assert created.exit_code == 0, created.output
    (nightly,) = listed(await muster(url, "schedule", "list", "--json"))
    command = nightly["entity"]["command"]
    assert (nightly["entity"]["verb"], command["type"], command["name"], command["nodes"]) == ("create", "CreateCluster", "web", 3)
    assert "request_id" not in command and nightly["entity"]["text"] == "cluster create web -t hadoop-small -n 3"
    # A dry run typed after `--` is refused, nothing written: the schedule kept its operation
    # without the dry run, and `-- cluster delete web --dry-run` deleted the cluster at its first tick (session 32).
    previewed = await muster(url, "schedule", "create", "preview", "--every", "10m", "--", "cluster", "create", "api",
                             "-t", "hadoop-small", "-n", "3", "--dry-run")
    assert previewed.exit_code == 2 and "is a dry run: it previews and changes nothing" in previewed.stderr, previewed.output
    assert [s["name"] for s in listed(await muster(url, "schedule", "list", "--json"))] == ["nightly"]
    # A command that is not an operation is refused before it runs: run to be captured, it did
    # what it does (`-- rule add gone ...` wrote the rule, `-- schedule create y ...` schedule y).
    for words in (["rule", "add", "gone", "-o", "delete"], ["schedule", "create", "inner", "--every", "1h", "--",
                                                           "cluster", "create", "api", "-t", "hadoop-small", "-n", "3"]):
        stray = await muster(url, "schedule", "create", "stray", "--every", "10m", "--", *words)
        assert stray.exit_code == 2 and "is not an operation muster can schedule" in stray.stderr, stray.output
        assert "nothing was run" in stray.stderr and "version 1 (add)" not in stray.stdout, stray.output
    assert "gone" not in [r["name"] for r in listed(await muster(url, "rule", "list", "--json"))]
    assert [s["name"] for s in listed(await muster(url, "schedule", "list", "--json"))] == ["nightly"]
    waits = await muster(url, "schedule", "create", "waits", "--every", "10m", "--", "cluster", "create", "api", "-t",
                         "hadoop-small", "-n", "3", "--wait")
    assert waits.exit_code == 2 and "leave --wait out" in waits.stderr, waits.output
    # Without a terminal (a pipe): plain columns, every value in full (the boxed table cut them).
    plain = (await muster(url, "schedule", "list")).stdout.splitlines()
    row = next(line for line in plain if line.startswith("nightly "))
    assert "…" not in row, plain
    assert "cluster create web -t hadoop-small -n 3" in row and re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", row), row
    assert (await muster(url, "schedule", "pause", "nightly")).exit_code == 0
    assert listed(await muster(url, "schedule", "list", "--json"))[0]["entity"]["paused"] is True
    assert (await muster(url, "schedule", "resume", "nightly")).exit_code == 0
    for kind, name in (("schedule", "nightly"), ("notify", "ops"), ("rule", "deletes"), ("policy", "nodes")):
        gone = await muster(url, kind, "remove" if kind == "notify" else "delete", name)
        assert gone.exit_code == 0 and "deleted" in gone.stdout, gone.output
    assert listed(await muster(url, "rule", "list", "--json")) == []
    # Applied again at once, within the bus's duplicate window: a new version, not an internal
    # error on a message id its first apply had (`atomic publish batch contains duplicate message id`).
    again = await muster(url, "policy", "apply", str(tmp_path / "nodes.rego"))
    assert again.exit_code == 0 and "policy nodes: version 2 (add)" in again.stdout, again.output


async def test_notify_add_refuses_what_the_notifier_could_not_deliver(url: str) -> None:
    """The governance service asks the notifier before it stores a webhook: a signing key it does
    not have, or a destination inside the deployment, is refused at `notify add`, not found out
    at the first delivery; a refused destination is the operator's to allow, and says how."""
    missing = await muster(url, "notify", "add", "ops", "--on", "job_failed", "--webhook", "https://hooks.example/x",
                           "--secret", "secret://nope")
    assert missing.exit_code == 2, missing.output
    assert "secret 'nope' is not in the notifier's secrets file" in missing.stderr and "ops-hook" not in missing.stderr
    metadata = await muster(url, "notify", "add", "ops", "--on", "job_failed", "--webhook", "http://169.254.169.254/latest/meta-data",
                            "--secret", "secret://ops-hook")
    assert metadata.exit_code == 2, metadata.output
    assert "169.254.169.254 is a link-local address" in metadata.stderr and "--webhook-allow" in metadata.stderr
    assert listed(await muster(url, "notify", "list", "--json")) == []
    made = await muster(url, "notify", "add", "ops", "--on", "job_failed, lease_expiring,job_failed", "--webhook", "https://hooks.invalid/x",
                        "--secret", "secret://ops-hook", "--cluster", "web-*", "--lease-warning", "2h")
    assert made.exit_code == 0 and "subscription ops: version 1 (add)" in made.stdout, made.output
    assert "warning: subscription 'ops': hooks.invalid does not resolve to a public address now" in made.stdout
    row = next(line for line in (await muster(url, "notify", "list")).stdout.splitlines() if line.startswith("ops "))
    assert "job_failed, lease_expiring (2 h before a lease ends)" in row and "web-*" in row, row  # once each


async def test_without_a_notifier_a_webhook_is_stored_with_a_warning(fresh_nats: str) -> None:
    """Session 36: the governance service's subscription to every `muster.gov` verb took the
    `notify-check` it asks the notifier, so with none running the request waited out its 10 s;
    it now serves its own verbs only and nats-server says "no responders" at once, to a raw
    client as well, while a verb of its own is still answered."""
    async with AsyncExitStack() as stack:
        nc = await connect(fresh_nats, name="governance")
        stack.push_async_callback(nc.close)
        await ensure_streams(nc.jetstream())
        await start_governance(nc, stack, "governance-cli")
        made = await muster(fresh_nats, "notify", "add", "ops", "--on", "job_failed", "--webhook", "https://hooks.example/x",
                            "--secret", "secret://nope")
        tested = await muster(fresh_nats, "notify", "test", "ops")
        body = json.dumps({"kind": "subscription", "entities": []}).encode()
        with pytest.raises(nats.errors.NoRespondersError):  # (a TimeoutError when the governance service took it)
            await nc.request(subjects.governance_request("default", principal_of(nc), "notify-check"), body, timeout=5)
        listing = await nc.request(subjects.governance_request("default", principal_of(nc), "list"), body, timeout=5)
    assert made.exit_code == 0 and "subscription ops: version 1 (add)" in made.stdout, made.output
    assert "warning: subscription 'ops' stored unchecked: no notifier is running;" in made.stdout
    assert [i["name"] for i in json.loads(listing.data)["items"]] == ["ops"], listing.data
    assert tested.exit_code == 3 and "no notifier service answered: is `muster up` (or `muster notifier`) running?" in tested.stderr, \
        tested.output


TWICE = 'package muster.twice\nimport rego.v1\n\ndeny contains msg if {\n  x := 1\n  x := 2\n  msg := sprintf("%v", [x])\n}\n'
UNBOUND = 'package muster.lim\nimport rego.v1\n\ndeny contains "too big" if {\n  input.request.nodes > limit\n}\n'


async def test_policy_names_what_opa_refuses_and_a_policy_stored_before_a_check(url: str, tmp_path: Path) -> None:
    """Session 34: a file named `Bad-Name!.rego` is refused (it was stored as `Bad-Name-`),
    `--name` names it; `x := 1; x := 2` is refused with its line as OPA refuses it; a policy the
    log holds from before a check (an event written as an older muster wrote it) is listed with
    a warning that it denies every operation until it is applied again or deleted."""
    bad = tmp_path / "Bad-Name!.rego"
    bad.write_text(NODES)
    refused = await muster(url, "policy", "apply", str(bad))
    assert refused.exit_code == 2 and "its name 'Bad-Name!' (the file's, without .rego) is not a policy name" in refused.stderr
    named = await muster(url, "policy", "apply", str(bad), "--name", "bad-name")
    assert named.exit_code == 0 and "policy bad-name: version 1 (add)" in named.stdout, named.output
    assert [i["name"] for i in listed(await muster(url, "policy", "list", "--json"))] == ["bad-name"]

    (tmp_path / "twice.rego").write_text(TWICE)
    twice = await muster(url, "policy", "apply", str(tmp_path / "twice.rego"))
    assert twice.exit_code == 2 and "policy apply refused: nothing written: 1 problem" in twice.stderr, twice.output
    assert "policy 'twice' (line 6) declares `x` with `:=` where its rule body assigned it above (OPA refuses it: var x " \
           "assigned above)" in twice.stderr, twice.output

    nc = await connect(url, name="older-muster")
    try:
        subject = subjects.governance_events("default", "policy", "lim")
        await EventStore(nc).append(subject, [Append(GovernancePut(kind="policy", name="lim", version=1, by="ada",
                                                                   entity={"name": "lim", "source": UNBOUND}),
                                                     msg_id=f"{subject}:1")])
    finally:
        await nc.close()
    shown = await muster(url, "policy", "list")
    assert shown.exit_code == 0 and "lim" in shown.stdout, shown.output
    assert ("warning: policy 'lim' (version 1) fails a check `muster policy apply` makes now: (line 5) reads `limit`"
            in shown.stderr), shown.output
    assert "every operation it judges is denied (fail closed) until it is applied again corrected or deleted (`muster " \
           "policy delete lim`)" in shown.stderr, shown.output
