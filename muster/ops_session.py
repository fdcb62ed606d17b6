"""What every operation command shares: its options, one session on the bus that sends the
command and reports the answer, and live progress of the job (`--wait`) from its events,
folded by the read model's JobProgress."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from contracts.commands import VERB_OF, ApplyPlan, Command, CreateCluster, DryRun, JobCommand, LeaseExtended, Rejected
from contracts.events import FINAL_JOB_EVENTS, FINAL_JOB_STATES
from contracts.identity import OPERATION_PERMISSIONS, Permission
from contracts.records import Recorded

from . import cli_support
from .cli_bus import Bus, CliClient, bus_options, open_client
from .cli_support import EXIT_DENIED, EXIT_FAILED, EXIT_INVALID, EXIT_UNREACHABLE, CliError, command, echo_json, json_option
from .client import ClusterInfo, new_request_id, rejected_words
from .readmodel.cost import hardware_rates, rate, type_changes
from .readmodel.progress import JobProgress
from .tables import Output, print_rows
from .times import shown_time
from .tracker_client import TrackerReads, recorded

out = Output(highlight=False, soft_wrap=True, markup=False)
err = Output(stderr=True, highlight=False, soft_wrap=True, markup=False)

_CLUSTER_ID = re.compile(r"cluster '?([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")

CAPTURE: ContextVar[list[Command] | None] = ContextVar("capture", default=None)
"""Set (to a list): an operation command builds its request and puts it there instead of
sending it (`muster schedule create NAME --cron ... -- cluster check c1` takes the request the
words after `--` make)."""

WAIT_UNTIL: dict[str, frozenset[str]] = {"pause": frozenset({"JobPaused", *FINAL_JOB_EVENTS})}
"""What `--wait` waits for, when it is not the end of the job."""


def service_list(values: Iterable[str]) -> list[str]:
    """SERVICES arguments: comma-separated, repeated, or both."""
    return [s for v in values for s in v.split(",") if s]


def chosen(values: Sequence[str], what: str, left_out: str = "") -> list[str] | None:
    """Names given as SERVICES, --services or --nodes (`service_list`), None when none were
    given. Given, yet only empty (`--services "$EMPTY"`, `,`), is refused naming `what`: it
    was read as none given, the template's services for a create, every service or every node
    for a stop."""
    if not values:
        return None
    names = service_list(values)
    if not names:
        noun = "node" if "node" in what.lower() else "service"
        raise CliError(f"{what}: no {noun} named, only {', '.join(repr(v) for v in values[:3])}"
                       + (f" (leave {what} out for {left_out})" if left_out else ""))
    return names


async def read_cluster(bus: Bus, ref: str) -> ClusterInfo:
    """A cluster by id or name, from its events (`show`, `drift`), through the tracker."""
    async with TrackerReads(bus) as tracker:
        return await tracker.cluster(ref)


@dataclass
class Options:
    bus: Bus
    wait: bool
    as_json: bool
    request_id: str | None
    by: str | None
    timeout: float
    dry_run: bool = False
    if_version: int | None = None


def _op_options(dry_run: bool, if_version: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`if_version`: the operation is on a cluster that has a version (not a create, which
    took `--if-version` and dropped it; over HTTP `If-Match` on a create is a 400)."""

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        async def wrapper(*args: Any, bus: Bus, wait: bool, as_json: bool, request_id: str | None, by: str | None,
                          timeout: float, **kwargs: Any) -> Any:
            opts = Options(bus, wait, as_json, request_id, by, timeout, kwargs.pop("dry_run", False), kwargs.pop("if_version", None))
            return await f(*args, opts=opts, **kwargs)

        g: Any = command(wrapper)
        if dry_run:
            g = click.option("--dry-run", is_flag=True,
                             help="print the layout and the plan and save it (`cluster apply PLAN_ID`); execute nothing")(g)
        if dry_run and if_version:
            g = click.option("--if-version", type=cli_support.WholeNumber(1), default=None,
                             help="refuse unless the cluster is at this version (`cluster show` prints it)")(g)
        g = click.option("--timeout", default=3600.0, show_default=True, type=cli_support.Duration(),
                         help="how long --wait waits at most (seconds, or 90s, 10m, 2h)")(g)
        g = click.option("--by", default=None, help="who asks, without a token (with one, the log records its principal)")(g)
        g = click.option("--request-id", default=None,
                         help="idempotency key: the same key always maps to the same job (default: a new one)")(g)
        g = json_option(g)
        g = click.option("--wait", is_flag=True, help="follow the job live until it ends; exit 0 if it succeeded, 1 if not")(g)
        g = bus_options(g)
        g.muster_operation = True  # (`operation_command`: what `muster schedule create ... --` may run to capture)
        return g

    return decorate


cluster_op = _op_options(dry_run=True)
create_op = _op_options(dry_run=True, if_version=False)
job_op = _op_options(dry_run=False)


def operation_command(root: click.Group, words: Sequence[str]) -> click.Command | None:
    """The command `words` name under `root` (`cluster delete web` -> `cluster delete`), None
    when they name none (a typo, an option first: click says why when it runs them)."""
    command: click.Command = root
    ctx = click.Context(root)
    for word in words:
        if not isinstance(command, click.Group):
            break
        found = command.get_command(ctx, word)
        if found is None:
            return None
        command = found
    return command


def is_operation(command: click.Command) -> bool:
    """A command that sends an operation request (built with `cluster_op` or `job_op`): run
    with CAPTURE set it sends nothing. Any other command does what it does, captured or not."""
    return bool(getattr(command.callback, "muster_operation", False))


class Session:
    """One command: its requests go on the bus, what it reads (clusters, the job it follows)
    comes from the tracker (docs/decisions/0016)."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.client: CliClient | None = None
        self._tracker: TrackerReads | None = None
        self.names: dict[str, str] = {}
        """Cluster id -> name, of the clusters this command named: what its errors call them."""

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self.client is not None:
            await self.client.__aexit__(t, e, tb)
        if self._tracker is not None:
            await self._tracker.__aexit__(t, e, tb)

    async def tracker(self) -> TrackerReads:
        """Where reads go (opened on first use: a create without --wait reads nothing)."""
        if self._tracker is None:
            self._tracker = await TrackerReads(self.opts.bus).__aenter__()
        return self._tracker

    async def c(self) -> CliClient:
        """The bus connection requests go on (opened on first use: reads need none)."""
        if self.client is None:
            self.client = await open_client(self.opts.bus, requested_by=self.opts.by)
        return self.client

    async def cluster(self, ref: str, needs: Permission | None = None) -> ClusterInfo:
        """The cluster `ref` names, read for the command's operation: the tracker refuses it
        without the operation's permission (`needs`, else the command's own), naming that
        grant, where a read alone was refused for `read` and, once given, the operation for more."""
        found = await (await self.tracker()).cluster(ref, needs or _operation_permission())
        self.names[found.id] = found.name
        return found

    def named(self, text: str) -> str:
        """`cluster <id>` (or `cluster '<id>'`) in a planner's answer, said as `cluster <name> (<id>)`."""
        for ident, name in self.names.items():
            for said in (f"cluster {ident!r}", f"cluster {ident}"):
                text = text.replace(said, f"cluster {name} ({ident})")
        return text

    async def _learn_names(self, text: str) -> None:
        """The names of clusters an answer names by id alone (an apply names no cluster: its
        plan does), best effort: a refusal is said with or without them."""
        for ident in set(_CLUSTER_ID.findall(text)) - set(self.names):
            with contextlib.suppress(CliError):
                await self.cluster(ident, "read")

    async def _ended(self, job_id: str, cmd: Command) -> str:
        """`, which failed: <why>` of a repeated request's job that has ended (best effort): a plan
        applied again after its job was rejected read as running now."""
        with contextlib.suppress(CliError):
            job = await (await self.tracker()).get(f"/v1/jobs/{job_id}")
            if job.get("state") in FINAL_JOB_STATES:
                why = f": {job['error']}" if job.get("error") else ""
                again = "; nothing runs again: a new dry run makes a new plan" if isinstance(cmd, ApplyPlan) else ""
                return f", which {'succeeded' if job['state'] == 'succeeded' else job['state'].replace('_', ' ')}{why}{again}"
        return ""

    def stamp(self, cmd: Command, requested_by: str) -> Command:
        update: dict[str, Any] = {"request_id": self.opts.request_id or new_request_id(), "requested_by": requested_by}
        if "dry_run" in type(cmd).model_fields:
            update["dry_run"] = self.opts.dry_run
        if "if_version" in type(cmd).model_fields and self.opts.if_version is not None:
            update["if_version"] = self.opts.if_version
        return cmd.model_copy(update=update)

    async def execute(self, cmd: Command) -> None:
        captured = CAPTURE.get()
        if captured is not None:  # its sender is the schedule's owner: no connection is needed
            captured.append(self.stamp(cmd, self.opts.by or ""))
            return
        client = await self.c()
        cmd = self.stamp(cmd, client.requested_by)
        verb = VERB_OF[cmd.type]  # type: ignore[attr-defined]
        since = 0
        if isinstance(cmd, JobCommand) and self.opts.wait:
            since = await (await self.tracker()).position(cmd.job_id)  # what the job does from now on
        reply = await client.request(cmd)
        if self.opts.as_json:
            echo_json(reply.model_dump(mode="json"))
        if isinstance(reply, Rejected):
            await self._learn_names(reply.reason)
            raise CliError(rejected_words(verb, reply, self.named, typed_as), EXIT_DENIED if reply.code == "forbidden" else EXIT_INVALID,
                           field=reply.field)
        if isinstance(reply, DryRun):
            if not self.opts.as_json:
                print_dry_run(verb, reply, getattr(cmd, "job_id", "JOB"))
            return
        if isinstance(reply, LeaseExtended):
            if not self.opts.as_json:
                # the cluster as the user named it (it said the id alone)
                out.print(self.named(f"lease of cluster {reply.cluster_id} extended: it expires at {shown_time(reply.expires_at)}"))
            return
        if not self.opts.as_json:
            dup = f" (a repeat of an earlier request: same job{await self._ended(reply.job_id, cmd)})" if reply.duplicate else ""
            if isinstance(cmd, JobCommand | ApplyPlan):  # named by its job or plan: the cluster's name was never looked up
                await self._learn_names(f"cluster {reply.cluster_id}")
            elif isinstance(cmd, CreateCluster):  # named by whoever typed it: said back as the others are
                self.names.setdefault(reply.cluster_id, cmd.name)
            out.print(self.named(f"{verb} accepted: job {reply.job_id}, cluster {reply.cluster_id}{dup}"))
            for warning in reply.warnings:
                out.print(f"warning: {warning}")
        if self.opts.wait:
            # A repeat's job did what it was asked before: its whole story says how it went (from
            # `since` nothing more came, and a job that had ended was waited on until --timeout).
            await self.follow(reply.job_id, verb, 0 if reply.duplicate else since)

    async def follow(self, job_id: str, title: str, since: int = 0) -> None:
        until = WAIT_UNTIL.get(title, frozenset(FINAL_JOB_EVENTS))
        tracker = await self.tracker()
        events = (recorded(item) async for item in tracker.events(job=job_id, after=since, follow=True))
        try:
            followed = await follow(events, job_id, title, until, self.opts.timeout, quiet=self.opts.as_json, to_the_end=True)
        except CliError as err:
            if err.exit_code != EXIT_UNREACHABLE or "goes on" in err.message:
                raise
            raise CliError(f"{err.message}; job {job_id} goes on without us (`muster watch {job_id}`)", err.exit_code) from None
        final = followed.final
        if self.opts.as_json:
            echo_json(final.model_dump(mode="json"))
        if final.type not in ("JobSucceeded", "JobPaused"):
            raise CliError(describe_end(job_id, final, followed.error_for(getattr(final, "reason", ""))), EXIT_FAILED)
        if not self.opts.as_json:
            out.print(describe_end(job_id, final))


_PARAM_OF = {"tolerance": "tolerate", "cluster_id": "cluster_ref", "lease_s": "lease"}
"""A request's field the commands take under another name."""


def typed_as(field: str) -> str | None:
    """How the running command takes a request's field (`services` -> `--services` of a
    create, `SERVICES` of an add-services; `rolling.tolerance` -> `--tolerance`), None when it
    takes none (a planner's refusal names the request's fields, which the user did not type)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return None
    parts = field.split(".")
    for name in dict.fromkeys(_PARAM_OF.get(p, p) for p in (parts[-1], parts[0])):
        for param in ctx.command.params:
            if (param.name == name or f"--{name.replace('_', '-')}" in param.opts) and not getattr(param, "hidden", False):
                return param.opts[0] if isinstance(param, click.Option) else param.human_readable_name
    return None


def _operation_permission() -> Permission:
    """What the running command's operation needs on its cluster (`read` for any other)."""
    ctx = click.get_current_context(silent=True)
    return OPERATION_PERMISSIONS.get(ctx.info_name or "", "read") if ctx is not None else "read"


def print_governance(reply: DryRun) -> None:
    """A dry run's cost and what the tenant's governance would say (docs/governance.md)."""
    cost = reply.cost
    if cost is not None:
        unknown = f"; no cost given for {', '.join(cost['unknown'])}" if cost.get("unknown") else ""
        rates = hardware_rates(cost, reply.layout)
        out.print(f"cost: {rate(cost['per_hour'])}/h for {len(cost['per_node'])} nodes (now {rate(cost['before_per_hour'])}/h)"
                  + (" · " + ", ".join(rates) if rates else "") + unknown)
        for line in type_changes(cost):  # each type the job changes, before -> once done (none for a create)
            out.print(f"  {line}")
    policy = reply.policy or {}
    for message in policy.get("deny", []):
        out.print(f"policy would deny: {message}")
    for message in policy.get("warn", []):
        # An approval's look repeats a warning that is new since the request among its warnings, saying so.
        if not any(w.startswith(message.removesuffix(")") + "; ") for w in reply.warnings):
            out.print(f"policy warns: {message}")
    if policy.get("approval"):
        out.print(f"approval: the request would wait for an approver (rules {', '.join(policy['approval'])})")


APPROVAL_STEPS = {
    "JobApprovalRequested": (": an approver decides (`muster job approve {job_id}` or `muster job reject {job_id}`); "
                             "--wait waits for the end "
                             "(Ctrl-C stops the waiting, not the job)"),
    "JobApproved": "", "JobRejected": "", "JobApprovalExpired": ""}
"""What `--wait` says in a pipe of a job's approval, after the event's own words ({job_id}: the
job's, so the command can be pasted)."""


def describe_end(job_id: str, final: Any, last_error: str = "") -> str:
    words = {"JobSucceeded": "succeeded", "JobFailed": "failed", "JobRolledBack": "was rolled back",
             "JobNeedsAttention": "needs an administrator's attention", "JobPaused": "is paused"}
    reason = getattr(final, "reason", "")
    # The planner's reason names its task's last error itself (`task X failed 3 times: <error>`),
    # on one line and cut at saga.REASON_ERROR_MAX characters with `…`.
    error = last_error.split(": ", 1)[-1] if re.match(r"\S+ attempt \d+: ", last_error) else last_error
    flat = " ".join(error.split())
    if flat and reason.endswith("…"):  # a cut reason: its whole error once, not twice
        cut = reason[:-1].rstrip()
        start = next((i + 2 for i in range(len(cut)) if cut.startswith(": ", i) and flat.startswith(cut[i + 2:])), -1)
        if start >= 0:
            reason, last_error = cut[:start] + flat, ""
    said = f"job {job_id} {words.get(final.type, final.type)}" + (f": {reason}" if reason else "")
    return said + (f"; last error: {last_error}" if last_error and flat not in reason else "")


@dataclass
class Followed:
    final: Any
    """The event that ended the wait."""
    last_error: str = ""
    """The last task failure seen (task, attempt, what it said)."""
    errors: dict[str, str] = field(default_factory=dict)
    """The last failure of each task, so the end names the error of the task its reason names."""

    def error_for(self, reason: str) -> str:
        named = re.match(r"task (\S+) failed", reason or "")
        return self.errors.get(named.group(1), self.last_error) if named else self.last_error


async def follow(events: AsyncIterator[Recorded], job_id: str, title: str, until: Iterable[str], timeout: float,
                 quiet: bool = False, to_the_end: bool = False) -> Followed:
    """Live progress of a job from its events (stderr: through the tracker for people, the bus
    for the demos), folded by the read model's JobProgress, until one of `until` (or `timeout`
    seconds: exit 3, saying so). `to_the_end`: `events` end with the job's story (the tracker's
    do), so a job's end is its last one: a retried job ended once before it ran again, and
    `muster job wait` said that first end (rolled back) of a job still running, then succeeding."""
    stop = frozenset(until)
    progress = JobProgress()
    followed = Followed(None)
    # Drawn on a terminal only: in a pipe (a script, a CI log) the bar's last frame was cut to 80
    # columns ("job rolled back: task n1002.start.yarn-nodemanager failed 3 times ━ … 0…"), and
    # the line after it says how the job ended, whole.
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=False, disable=quiet or not err.is_terminal) as bars:
        bar = bars.add_task(f"{title}: waiting", total=None)
        try:
            async with asyncio.timeout(timeout):
                async for r in events:
                    step = progress.apply(r)
                    if r.type in ("TaskFailed", "TaskAttemptFailed"):
                        followed.last_error = f"{r.event.task_id} attempt {r.event.attempt}: {r.event.error}"
                        followed.errors[r.event.task_id] = followed.last_error
                    stages = progress.stage_progress()  # of the plan being run: forward, or the rollback
                    total = sum(s["total"] for s in stages)
                    bars.update(bar, total=total or None, completed=sum(s["done"] for s in stages),
                                description=f"{title}: {step['text']}"[:120])
                    if r.type in APPROVAL_STEPS and not quiet and not err.is_terminal:
                        # No bar in a pipe: a job held for a person said nothing for up to --timeout.
                        err.print(f"{title}: {step['text']}" + APPROVAL_STEPS[r.type].format(job_id=job_id))
                    if r.type == "JobRetried":
                        followed.final = None  # the end read before it was not the job's last
                    elif r.type in stop:
                        followed.final = r.event
                        if not to_the_end or r.type not in FINAL_JOB_EVENTS:
                            break
        except TimeoutError:
            status = progress.status()
            # Followed from a request on a job (a cancel, a resume) it may have seen none of the
            # job's own story: it said "is still not started" of a running job.
            said = f"is still {status['state']}" if status else "has not ended"
            raise CliError(f"job {job_id} {said} after {timeout:g} s (--timeout); it goes on without us "
                           f"(`muster watch {job_id}`)", EXIT_UNREACHABLE) from None
    if followed.final is None:
        raise CliError(f"the story of job {job_id} ended before {' or '.join(sorted(stop))}", EXIT_UNREACHABLE)
    return followed


def thrown_in_words(tasks: dict[str, Any], thrown_in: list[str]) -> str:
    """A plan's thrown-in starts by service: the nodes, or how many past three (a start on
    1,000 datanodes is one phrase). An expand's `start hdfs-namenode` on an old node read as
    the expand touching it (walk of session 27)."""
    nodes: dict[str, list[str]] = {}
    for tid in thrown_in:
        if tid in tasks:
            nodes.setdefault(str(tasks[tid].get("service")), []).append(str(tasks[tid]["node"]))
    return ", ".join(f"{service} on " + (", ".join(on) if len(on) <= 3 else f"{len(on)} nodes") for service, on in nodes.items())


def print_dry_run(verb: str, reply: DryRun, job_id: str = "JOB") -> None:
    if verb == "approve":  # the job's own plan, recorded with it: nothing to save (decision 42)
        out.print("dry run of approve: nothing was decided; approved now, the job would run this plan, judged so:")
    else:
        out.print(f"dry run of {verb}: nothing was executed; the plan is saved")
    if reply.layout is not None:
        print_rows(f"layout: {reply.layout.nodes} nodes", ["count", "hardware", "image", "services"],
                   [[str(g.count), g.hardwaretype, g.imagetype, ", ".join(g.services)] for g in reply.layout.layout],
                   out, heading=True)
    tasks = {t["id"]: t for t in reply.plan.get("tasks", [])}
    stages = reply.plan.get("stages", [])
    out.print(f"plan: {len(tasks)} task{'s' if len(tasks) != 1 else ''} in {len(stages)} stage{'s' if len(stages) != 1 else ''}")
    rolling = reply.plan.get("rolling")
    if rolling:
        batches = rolling["batches"]
        out.print(f"rolling: {len(batches)} batches, each after the previous one is healthy; "
                  f"{rolling['tolerance']} node(s) may fail")
        for i, batch in enumerate(batches, start=1):
            out.print(f"  batch {i}: {', '.join(batch)}")
    for i, stage in enumerate(stages, start=1):
        # Each service named: a stop of one service also stops what depends on it, and the
        # preview is where that shows.
        counts = Counter(" ".join(filter(None, (tasks[t]["action"], tasks[t].get("service")))) for t in stage if t in tasks)
        out.print(f"  stage {i}: " + ", ".join(f"{n}× {a}" for a, n in counts.items()))
    thrown = thrown_in_words(tasks, reply.plan.get("thrown_in") or [])
    if thrown:
        out.print(f"running already, started again so what needs them starts after them (idempotent; a rollback "
                  f"leaves them): {thrown}")
    limits = reply.plan.get("limits") or {}
    if "provider" in limits:
        p = limits["provider"]
        out.print(f"limit: at most {p['maxconcurrent']} of its {p['tasks']} tasks on provider {p['name']!r} "
                  "(create, confirm, delete) run at once, with the tenant's other jobs")
    if "tenant" in limits:
        out.print(f"limit: at most {limits['tenant']} tasks of the tenant run at once")
    print_governance(reply)
    for warning in reply.warnings:
        out.print(f"warning: {warning}")
    if verb == "approve":
        said = "an approval now is refused: the policies deny it (above)" if (reply.policy or {}).get("deny") else \
            f"the policies allow it now: `muster job approve {job_id}` runs it"
        out.print(said)
    if reply.plan_id:
        made_on = f"cluster version {reply.cluster_version}" if reply.cluster_version is not None else "a new cluster"
        if (reply.policy or {}).get("deny"):  # an apply is admitted as any request is: it would be refused
            then = "is refused while the tenant's policies deny it (above)"
        else:
            then = "runs exactly this plan, or is refused if the cluster or the catalog changed"
        out.print(f"plan {reply.plan_id} ({made_on}, catalog {reply.catalog_version}): `muster cluster apply {reply.plan_id}` {then}")
