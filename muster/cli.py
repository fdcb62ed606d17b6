"""The `muster` command. Each subcommand lives next to the code it drives and is imported
only when used, so `muster solve` does not pay for aiohttp and `muster up` does not pay for
the solver."""

from __future__ import annotations

import importlib
from typing import Any

import click

from muster import tracing

# name -> ("module:attribute" of a click command, one-line help shown without importing it)
COMMANDS: dict[str, tuple[str, str]] = {
    "up": ("muster.runtime.cli:up", "Start nats-server and the services."),
    "down": ("muster.runtime.cli:down", "Stop the deployment muster up runs on a data directory."),
    "demo": ("muster.runtime.cli:demo", "Start everything, build a 5-node cluster, then delete it."),
    "solver": ("services.solver.entrypoint:main", "Run the solver service."),
    "planner": ("services.planner.entrypoint:main", "Run the planner service."),
    "provisioner": ("services.provisioner.entrypoint:main", "Run a provisioner (workers + plugins)."),
    "tracker": ("services.tracker.entrypoint:main", "Run the tracker HTTP API."),
    "auth": ("services.auth.entrypoint:main", "Run the auth service (nats-server's auth callout, identities)."),
    "solve": ("services.solver.cli:solve", "Solve a cluster layout from a catalog folder (no bus)."),
    "plan": ("services.planner.cli:plan", "Plan the task DAG of an operation (dry run, no bus)."),
    "status": ("services.tracker.cli:status", "A job's status, from the tracker (its owner's view, or the log's)."),
    "watch": ("services.tracker.cli:watch", "Follow a job live, stage by stage, until it ends."),
    "history": ("services.tracker.cli:history", "A job's or a cluster's readable timeline from the log."),
    "logs": ("services.tracker.cli:logs", "What a job's tasks said: each attempt's stdout and stderr, from the log."),
    "replay": ("services.tracker.cli:replay", "Rebuild a cluster's state as it was at a point of the log."),
    "events": ("services.tracker.cli:events", "Dump or tail raw events as JSON lines."),
    "catalog": ("muster.catalog.cli:catalog", "Validate, apply, diff, get, history and delete catalog entities."),
    "cluster": ("muster.ops_cli:cluster", "Cluster operations: create, expand, add services... and list/show."),
    "job": ("muster.ops_cli:job", "Job control: pause, resume, cancel, retry, approve, reject, wait; list."),
    "provisioners": ("services.provisioner.cli:provisioners", "List live provisioners; drain one."),
    "tenant": ("muster.auth_cli:tenant", "Tenants: create, list (super admins)."),
    "user": ("muster.auth_cli:user", "Users and admins: create, list, disable."),
    "token": ("muster.auth_cli:token", "Bearer tokens: create (shown once), list, revoke."),
    "grant": ("muster.auth_cli:grant", "Give a principal read, write, execute, grant or approve on a scope."),
    "revoke": ("muster.auth_cli:revoke", "Take a permission back from a principal."),
    "whoami": ("muster.auth_cli:whoami", "Who the token in use is, and what it may do."),
    "planners": ("services.planner.cli:planners", "List live planners and the shards each acts for."),
    "ps": ("muster.runtime.ps:ps", "The running muster up's processes: PIDs, alive or not, restarts, logs."),
    "reload": ("muster.runtime.reload:reload", "Have the running muster up's notifier, pool service and planners read their secrets and allow files again."),
    "tls": ("muster.tls.cli:tls", "Certificates: issue them from a local CA; rotate a running deployment's."),
    "pool": ("services.pool.cli:pool", "Resource pools: add-hosts, list, show, configure, resolve, reset, remove-host; serve."),
    "governance": ("services.governance.entrypoint:main", "Run the governance service (rules, policies, schedules)."),
    "notifier": ("services.notifier.entrypoint:main", "Run the notifier (webhooks and bus messages to subscribers)."),
    "policy": ("services.governance.cli:policy", "Rego policies on every request: apply, list, delete, test."),
    "rule": ("services.governance.cli:rule", "Approval rules: which requests wait for an approver (add, list, delete)."),
    "notify": ("services.governance.cli:notify", "Notification subscriptions: add, list, remove, test."),
    "schedule": ("services.governance.schedule_cli:schedule", "Scheduled operations: create, list, pause, resume, delete."),
}


SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Run it", ("up", "down", "ps", "demo", "reload", "tls")),
    ("Clusters and jobs", ("cluster", "job", "status", "watch", "history", "logs", "replay", "events")),
    ("Catalog and dry runs without a bus", ("catalog", "solve", "plan")),
    ("Access", ("whoami", "tenant", "user", "token", "grant", "revoke")),
    ("Governance", ("rule", "policy", "notify", "schedule")),
    ("Operators", ("pool", "provisioners", "planners")),
    ("One service alone (muster up runs them all)", ("auth", "solver", "planner", "provisioner", "tracker", "governance", "notifier")),
)
"""`muster --help` in sections, by what a person is doing: one flat list of every name mixed the
commands people use with the services `muster up` runs (`planner` beside `planners`, `notifier`
beside `notify`), and a newcomer read `muster planner` as the way to see the planners."""


TRACED = frozenset({"cluster", "job"})
"""Commands whose requests start a trace when tracing is on (docs/tracing.md); the services'
own commands set it up in their processes."""


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        for title, names in SECTIONS:
            with formatter.section(title):
                formatter.write_dl([(name, COMMANDS[name][1]) for name in names])

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as err:  # click (8.4+) suggests from `self.commands`, empty here
            name = getattr(err, "command_name", None)
            if name is None:
                raise
            raise type(err)(name, possibilities=COMMANDS, ctx=ctx) from None  # type: ignore[call-arg]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, _, attr = COMMANDS[name][0].partition(":")
        command: Any = getattr(importlib.import_module(module), attr)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="muster")
@click.pass_context
def main(ctx: click.Context) -> None:
    """muster: an event-sourced cluster manager on NATS JetStream."""
    if tracing.wanted() and ctx.invoked_subcommand in TRACED:
        try:
            tracing.configure("cli")
        except tracing.TracingError as err:
            from muster.cli_support import EXIT_INVALID, CliError

            raise CliError(f"{err} (docs/tracing.md)", EXIT_INVALID) from None
        from muster.runtime.logs import plain_scrubbed

        plain_scrubbed()
        ctx.call_on_close(tracing.shutdown)
    # A caller's trace (TRACEPARENT) is continued, whether muster's own spans are on or not.
    ctx.with_resource(tracing.from_environment())
