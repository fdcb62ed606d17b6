"""The simulated automator: records what would have run, with injected latency and failures.

Settings come from the service action's fields, then from the task's provider fields (so the
demo's `sim` provider `latency_ms`/`failure_rate` apply to service actions too), then 0.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from contracts.catalog import Action
from contracts.tasks import TaskOutcome
from services.provisioner.plugins.base import AutomatorPlugin, PluginContext, PluginEnv, failed, succeeded
from services.provisioner.plugins.descriptor import PluginDescriptor
from services.provisioner.plugins.simulation import behaviour, simulate_latency


@dataclass(frozen=True)
class SimulatedRun:
    cluster_id: str
    node_id: str
    service: str
    action: Action
    script: str
    ok: bool
    config: dict[str, Any] = field(default_factory=dict)
    """The cluster config as the plugin got it (its macros expanded)."""


STATE_RESULT = "simulated.state."
"""Node result `simulated.state.<service>`: `stopped` after a stop (and `running` after a start
that follows one). A `status` answers from it first, so it answers the same on any provisioner
of a deployment; a service started and never stopped is running."""


class SimulatedAutomator(AutomatorPlugin):
    runs: deque[SimulatedRun]
    """What ran, in order: the latest MAX_RUNS (for tests and demos)."""

    MAX_RUNS = 10_000

    def __init__(self, descriptor: PluginDescriptor, env: PluginEnv) -> None:
        super().__init__(descriptor, env)
        self.runs = deque(maxlen=self.MAX_RUNS)
        self.states: dict[tuple[str, str, str], str] = {}
        """(cluster, node, service) -> running/stopped, from the starts and stops it ran."""

    async def run(self, action: Action, ctx: PluginContext) -> TaskOutcome:
        b = behaviour(ctx.task, ctx.fields, "automator", fallback=ctx.task.provider.fields)
        for said in str(ctx.fields.get("progress") or "").split(";"):
            if said.strip():
                ctx.progress(said.strip())
        await simulate_latency(b)
        service = ctx.task.service.name if ctx.task.service else ""
        script = " ".join(str(ctx.fields.get(k) or "") for k in ("script", "args")).strip()
        line = (
            f"[simulated {action.value}] {service or 'node'} on {ctx.node.hostname}"
            f"{': ' + script if script else ''} ({b.latency_ms:.0f} ms)"
        )
        self.runs.append(SimulatedRun(ctx.task.cluster_id, ctx.node.id, service, action, script, not b.fails, ctx.task.config))
        if b.fails:
            return failed(b.failure(action.value), stdout=line, stderr=f"simulated error in {script or action.value}",
                          permanent=b.permanent)
        key = (ctx.task.cluster_id, ctx.node.id, service)
        recorded = ctx.task.results.get(STATE_RESULT + service)
        if action in (Action.START, Action.STOP):
            self.states[key] = "running" if action is Action.START else "stopped"
            if action is Action.STOP or recorded == "stopped":  # a fact any provisioner reads back
                return succeeded({STATE_RESULT + service: self.states[key]}, stdout=line)
        if action is Action.STATUS:
            state = str(ctx.fields.get("state") or recorded or self.states.get(key, "running"))
            return succeeded({"state": state}, stdout=f"{line}: {state}")
        return succeeded(stdout=line)

    async def aclose(self) -> None:
        self.runs.clear()
        self.states.clear()
