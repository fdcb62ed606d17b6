"""The soak's nemesis menu (docs/faults.md): what it may do to a `NetStack` (or, without
namespaces, a loopback `FaultStack`: kills only), each fault an (inject, repair) pair.

| kind | weight | inject | repair |
|---|---|---|---|
| kill | 30 | kill -9 a service or a NATS node | start it again (same arguments, port, store) |
| isolate | 16 | nothing in or out of one process (a service or a NATS node) | heal |
| split | 10 | a NATS node cut from the other two (the routes; clients still reach it) | heal |
| one-way | 8 | what a NATS node sends the other two is lost; it hears them | heal |
| flap | 8 | a process's link down and up every 0.5-1.5 s | link up |
| loss | 8 | 5-30 % of a process's packets dropped, each way | heal |
| latency | 8 | 50-300 ms each way between the NATS nodes (the routes, through the delay proxy) | heal |
| restart | 6 | a NATS node stopped gracefully (SIGTERM) | start it again |
| combined | 6 | a NATS node split and a service killed at once | both repaired |

One fault at a time (but `combined`), so the NATS cluster keeps a majority except while a
split meets a kill; everything is repaired before the next one.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from muster.runtime.supervisor import StartError

from .harness import FaultStack
from .netstack import NetStack

Action = Callable[[], Awaitable[None]]

WEIGHTS = {"kill": 30, "isolate": 16, "split": 10, "one-way": 8, "flap": 8, "loss": 8, "latency": 8, "restart": 6,
           "combined": 6}


@dataclass
class Fault:
    kind: str
    what: str
    inject: Action
    repair: Action


def pick(fs: FaultStack, rng: random.Random) -> Fault:
    """A fault for this stack: any kind on a `NetStack`, a kill or a restart otherwise."""
    kinds = dict(WEIGHTS) if isinstance(fs, NetStack) else {"kill": 30, "restart": 6}
    kind = rng.choices(list(kinds), weights=list(kinds.values()))[0]
    services = list(fs.deployment.commands())
    nodes = list(range(len(fs.nodes)))
    if kind == "restart" and nodes:
        i = rng.choice(nodes)
        return Fault(kind, f"nats {fs.nodes[i].name} stopped (SIGTERM)", lambda: fs.nodes[i].stop(), lambda: fs.restart_server(i))
    if kind in ("kill", "restart"):
        return _kill(fs, rng.choice(services + [f"nats {n.name}" for n in fs.nodes]))
    assert isinstance(fs, NetStack)
    nem = fs.nemesis
    names = [n.name for n in fs.nodes]
    node = rng.choice(names)
    rest = [n for n in names if n != node]
    anyone = rng.choice(services + names)
    if kind == "isolate":
        return Fault(kind, f"{anyone} isolated", lambda: nem.isolate(anyone), nem.heal)
    if kind == "split":
        return Fault(kind, f"{node} split from {', '.join(rest)}", lambda: nem.partition([node], rest), nem.heal)
    if kind == "one-way":
        return Fault(kind, f"{node} -> {', '.join(rest)} lost (one way)", lambda: nem.partition([node], rest, one_way=True), nem.heal)
    if kind == "flap":
        period = rng.uniform(0.5, 1.5)

        async def flapping() -> None:
            nem.flap(anyone, period, 3600.0)  # until the repair (heal) stops it

        return Fault(kind, f"{anyone}'s link flapping every {period:.1f}s", flapping, nem.heal)
    if kind == "loss":
        percent = rng.randint(5, 30)
        return Fault(kind, f"{anyone} loses {percent}% of its packets", lambda: nem.loss(anyone, percent), nem.heal)
    if kind == "latency":
        ms = rng.randint(50, 300)

        async def slow() -> None:
            for i, a in enumerate(names):
                for b in names[i + 1:]:
                    await nem.latency(a, b, ms)

        return Fault(kind, f"{ms} ms between the NATS nodes", slow, nem.heal)
    victim = _kill(fs, rng.choice(services))

    async def both() -> None:
        await nem.partition([node], rest)
        await victim.inject()

    async def undo() -> None:
        await nem.heal()
        await victim.repair()

    return Fault(kind, f"{node} split and {victim.what}", both, undo)


def _kill(fs: FaultStack, name: str) -> Fault:
    if name.startswith("nats "):
        i = next(k for k, n in enumerate(fs.nodes) if n.name == name.split(" ", 1)[1])
        return Fault("kill", f"kill -9 {name}", lambda: _discard(fs.kill_server(i)), lambda: fs.restart_server(i))
    return Fault("kill", f"kill -9 {name}", lambda: _discard(fs.kill(name)), lambda: _start_again(fs, name))


async def _start_again(fs: FaultStack, name: str, tries: int = 3) -> None:
    """As a process manager would (compose's `restart: unless-stopped`): a service that exits
    during its start (JetStream answered 503 for a moment, right after a partition healed) is
    started again, a few times, before the soak gives up on it."""
    for attempt in range(tries):
        try:
            await fs.restart(name)
            return
        except StartError as err:
            print(f"[nemesis] {name} exited during its start ({err}); starting it again", flush=True)
            await fs.kill(name)  # (reaps it and takes it out of the deployment)
            if attempt + 1 == tries:
                raise
            await asyncio.sleep(2.0)


async def _discard(work: Awaitable[object]) -> None:
    await work
