"""The simulated cloud: machines are entries in a dict, latency and failures are injected."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from contracts.tasks import TaskOutcome
from services.provisioner.plugins.base import PluginContext, PluginEnv, ProviderPlugin, failed, succeeded
from services.provisioner.plugins.descriptor import PluginDescriptor
from services.provisioner.plugins.simulation import Behaviour, behaviour, fake_ipv4, simulate_latency


@dataclass
class SimulatedMachine:
    providerid: str
    cluster_id: str
    node_id: str
    hostname: str
    ip: str
    confirmed: bool = False


class SimulatedProvider(ProviderPlugin):
    """Machines exist only in this process. Confirm and delete of an id this process does not
    know succeed (a retry may run on another provisioner than the create)."""

    machines: dict[str, SimulatedMachine]

    def __init__(self, descriptor: PluginDescriptor, env: PluginEnv) -> None:
        super().__init__(descriptor, env)
        self.machines = {}

    async def _simulate(self, ctx: PluginContext) -> tuple[Behaviour, str, TaskOutcome | None]:
        """Wait the drawn latency; (the draw, a line of output, the failure if one was drawn)."""
        b = behaviour(ctx.task, ctx.fields, "provider")
        await simulate_latency(b)
        line = (
            f"[simulated {ctx.action.value}] node {ctx.node.id} ({ctx.node.hostname}) "
            f"region {ctx.fields.get('region', 'local')}, {b.latency_ms:.0f} ms"
        )
        failure = (
            failed(b.failure(ctx.action.value), stdout=line, permanent=b.permanent)
            if b.fails
            else None
        )
        return b, line, failure

    async def create(self, ctx: PluginContext) -> TaskOutcome:
        b, line, failure = await self._simulate(ctx)
        if failure:
            return failure
        seeded = ctx.fields.get("seed") not in (None, "")
        providerid = f"sim-{b.rng.getrandbits(48):012x}" if seeded else f"sim-{uuid.uuid4().hex[:12]}"
        ip = fake_ipv4(providerid)
        self.machines[providerid] = SimulatedMachine(providerid, ctx.task.cluster_id, ctx.node.id, ctx.node.hostname, ip)
        return succeeded(
            {"providerid": providerid, "ssh-auth": {"user": ctx.node.sshuser or "muster"}},
            ipaddresses={"access_v4": ip, "bind_v4": ip},
            stdout=f"{line}: created {providerid}",
        )

    async def confirm(self, ctx: PluginContext) -> TaskOutcome:
        providerid = ctx.providerid
        if not providerid:
            return failed("confirm: the node has no providerid (its create did not succeed)")
        _, line, failure = await self._simulate(ctx)
        if failure:
            return failure
        machine = self.machines.get(providerid)
        if machine is not None:
            machine.confirmed = True
        ip = machine.ip if machine else fake_ipv4(providerid)
        return succeeded(
            {"simulated": True},
            ipaddresses={"access_v4": ip, "bind_v4": ip},
            stdout=f"{line}: {providerid} is up at {ip}",
        )

    async def delete(self, ctx: PluginContext) -> TaskOutcome:
        _, line, failure = await self._simulate(ctx)
        if failure:
            return failure
        providerid = ctx.providerid
        if not providerid:
            return succeeded(stdout=f"{line}: nothing to delete (no providerid)")
        known = self.machines.pop(providerid, None) is not None
        return succeeded(stdout=f"{line}: deleted {providerid}" + ("" if known else " (unknown here; already gone)"))

    async def aclose(self) -> None:
        self.machines.clear()
