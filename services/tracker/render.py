"""How the operator commands draw what they read: a job's status as a summary and a table,
live bars for a job and its stages, a replayed cluster as text."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from contracts.events import FINAL_JOB_STATES
from muster.readmodel.cost import approval_cost, rate, type_changes, unpriced, waiting_cost
from muster.readmodel.progress import JobProgress
from muster.readmodel.timeline import place
from muster.tables import print_rows
from muster.times import shown_time
from services.pool.domain.views import resources_line


def print_status(body: dict[str, Any], console: Console, cluster_name: str | None = None) -> None:
    stage = body.get("stage") or {}
    counts = ", ".join(f"{n} {s}" for s, n in body.get("counts", {}).items()) or "no tasks yet"
    cluster = f"{cluster_name} ({body['cluster_id']})" if cluster_name else body["cluster_id"]
    console.print(f"job {body['id']}: [bold]{body['state']}[/bold] ({body['operation']} of cluster {escape(cluster)})")
    console.print(f"  owner {body.get('owner') or '?'} · answered from the {body.get('source')} · requested by {body.get('requested_by')}")
    console.print(f"  started {shown_time(body.get('started_at'))} · finished {shown_time(body.get('finished_at'))}")
    where = f"stage {stage['current']} of {stage.get('total', 0)}" if stage.get("current") else f"{stage.get('total', 0)} stages"
    if stage.get("current") and body.get("state") in FINAL_JOB_STATES:  # over: where it stopped, not where it is
        where = "stopped at " + where
    console.print(f"  tasks: {counts} of {body.get('tasks_total', 0)} · {where}")
    if body.get("error"):
        console.print(f"  error: {escape(body['error'])}")  # a script's words, brackets and all
    if body.get("resources"):
        console.print("  " + resources_line(body["resources"], ended=body.get("state") in FINAL_JOB_STATES))
    if body.get("trace_id"):  # what a tracing UI looks up (docs/tracing.md, "Seeing a job's trace")
        console.print(f"  trace {body['trace_id']}")
    for warning in body.get("warnings") or ():
        console.print(f"  [yellow]warning:[/yellow] {escape(warning)}", highlight=False)
    for warned in body.get("policy_warnings") or ():
        console.print(f"  [yellow]policy warns:[/yellow] {escape(str(warned.get('message')))} (policy "
                      f"{escape(str(warned.get('policy')))})", highlight=False)
    if body.get("approval"):
        line = approval_line(body["approval"], body.get("state") == "waiting_for_approval", str(body.get("id", "JOB")))
        console.print(f"  {escape(line)}", highlight=False)
        for change in type_changes(approval_cost(body["approval"])):
            console.print(f"    {escape(change)}", highlight=False)
    if body.get("tasks"):
        print_rows(None, ["task", "state", "attempt", "node", "runs on"],
                   [[t["id"], t["state"], str(t["attempt"]), t.get("node") or "", place(t.get("provisioner"), t.get("worker"))]
                    for t in body["tasks"]], console)


def approval_line(a: dict[str, Any], waiting: bool, job_id: str = "JOB") -> str:
    """A job's approval for people: what it waits for and what it costs, or how it was decided;
    while it waits, the commands that decide it, whole, to paste."""
    cost = a.get("cost") or {}
    costs = (f"; costs {rate(cost['per_hour'])}/h once done (now {rate(cost.get('before_per_hour', 0))}/h)"
             f"{unpriced(cost, a.get('layout'))}") if cost else ""
    if waiting:
        costs = f"; {waiting_cost(a)}" if cost else ""
        return (f"approval: waits (rules {', '.join(a.get('rules') or [])}) until {shown_time(a.get('expires_at'))}{costs}: "
                f"`muster job approve {job_id}` or `muster job reject {job_id}`")
    decided = {"approved": "approved", "rejected": "rejected", "expired": "expired: nobody decided"}.get(
        str(a.get("decision")), str(a.get("decision") or "not decided"))
    by = f" by {a['by']}" if a.get("by") else ""
    comment = f": {a['comment']}" if a.get("comment") else ""
    now = a.get("approved_cost") or {}
    if now and cost and rate(now["per_hour"]) != rate(cost["per_hour"]):  # prices changed while it waited (decision 42)
        costs += f"; {rate(now['per_hour'])}/h at the prices of its approval"
    return f"approval: {decided}{by}{comment} (rules {', '.join(a.get('rules') or [])}){costs}"


class LiveView:
    """One bar for the job and one per stage of the plan being run."""

    def __init__(self, console: Console) -> None:
        self.bars = Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                             console=console)
        self.bars.start()
        self.job = self.bars.add_task("job: waiting for a plan", total=None)
        self.stages: list[TaskID] = []
        self.phase = ""

    def update(self, progress: JobProgress, step: dict[str, Any]) -> None:
        stages = progress.stage_progress()
        if progress.phase != self.phase or len(stages) != len(self.stages):
            for bar in self.stages:
                self.bars.remove_task(bar)
            self.phase = progress.phase
            self.stages = [self.bars.add_task("", total=s["total"]) for s in stages]
        for bar, s in zip(self.stages, stages, strict=True):
            running = f" · {', '.join(s['running'][:3])}" if s["running"] else ""
            failed = f" · {s['failed']} failed" if s["failed"] else ""
            self.bars.update(bar, completed=s["done"], description=f"  {self.phase} stage {s['stage']}{failed}{running}")
        done = step["counts"].get("succeeded", 0)
        self.bars.update(self.job, total=step["tasks_total"] or None, completed=done,
                         description=f"job {step['state']}: {step['text']}"[:70])

    def close(self) -> None:
        self.bars.stop()



def render_replay(state: dict[str, Any]) -> str:
    c, asof = state["cluster"], state["as_of"]
    lines = [
        f"cluster {c['id']} ({c['name']!r}, tenant {c['tenant']}) as of "
        + (f"{shown_time(asof['at'])} (log sequence {asof['seq']})" if asof["at"] else f"log sequence {asof['seq']}"),
        f"  its last event then: #{asof['cluster_event_seq']} at {shown_time(asof['cluster_event_time'])}",
        f"  status {c['status']}" + (f" ({c['status_reason']})" if c["status_reason"] else "") + f", {_its_job(c['job_id'], state['jobs'])}",
        f"  template {c['template']}, provider {c['provider']}, {len(c['nodes'])} nodes",
    ]
    for n in c["nodes"]:
        ips = ", ".join(f"{k} {v}" for k, v in n["ipaddresses"].items())
        lines.append(f"    {n['id']:<8} {n['hostname']:<28} {n['hardwaretype']}/{n['imagetype']}  [{', '.join(n['services'])}]"
                     + (f"  {ips}" if ips else ""))
    if c.get("drift"):  # with the catalog of that point: what a repair asked then would have run
        lines.append(f"  drift ({len(c['drift'])}):")
        for d in c["drift"]:
            repair = (d["repair"] + (f" after {', '.join(d['after'])}" if d.get("after") else "")) or "none: check again"
            lines.append(f"    {d['node']:<8} {d['service']}: {d['observed']}, should be {d['desired']} (repair: {repair})")
    lines.append(f"  jobs ({len(state['jobs'])}):")
    # columns as wide as their longest entry (`configure-restart succeeded` pushed the rest right)
    wide = {k: max((len(j[k]) for j in state["jobs"]), default=0) for k in ("operation", "state")}
    for j in state["jobs"]:
        counts = ", ".join(f"{n} {s}" for s, n in j["counts"].items())
        lines.append(f"    {j['id']} {j['operation']:<{wide['operation']}}  {j['state']:<{wide['state']}}  {counts}"
                     + (f"  error: {j['error']}" if j["error"] else ""))
    return "\n".join(lines)


def _its_job(job_id: str | None, jobs: list[dict[str, Any]]) -> str:
    """A cluster keeps the id of its latest job: one that has ended is its last, not its current
    one (the view said `current job <id>` of a job that had succeeded)."""
    if not job_id:
        return "no job"
    job_state = next((j["state"] for j in jobs if j["id"] == job_id), None)
    if job_state is None:
        return f"job {job_id}"
    return f"{'last' if job_state in FINAL_JOB_STATES else 'current'} job {job_id} ({job_state})"
