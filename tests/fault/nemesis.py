"""The partition nemesis: cut, split, flap, lose and slow the links between the namespaces of a
`netns.Network` (Jepsen's nemeses, on a kernel without netem).

    nemesis = Nemesis(net)
    await nemesis.isolate("planner-1")                    # nothing in or out (the harness too)
    await nemesis.partition(["nats-1"], ["nats-2", "nats-3", "host"])   # a minority cut off
    await nemesis.partition(["nats-1"], ["nats-2"], one_way=True)      # nats-1 -> nats-2 lost only
    await nemesis.loss("nats-2", 10)                      # 10 % of its packets dropped, each way
    await nemesis.latency("nats-1", "nats-2", 200)        # 200 ms each way (proxied links only)
    flapping = nemesis.flap("provisioner-2", 1.0, 6.0)   # its link down/up every second for 6 s
    await nemesis.heal()                                  # all of it undone

- **Cuts and loss are nftables rules inside each node's own namespace** (`table inet nemesis`:
  `ip daddr {...} drop` on output, `ip saddr {...} drop` on input, `numgen random mod 100 < N
  drop` for loss), loaded atomically with `nft -f -`. The host's ruleset is never touched. A cut
  from A to B is enforced at both ends (A's output, B's input), so it holds on proxied links
  too, where B sees the proxy's address rather than A's.
- **Flapping** sets the host end of the node's veth down and up (`ip link`).
- **Latency** comes from `DelayProxy`, a process of its own in the host namespace: a link that
  should be slowed must be made through it (the NATS routes, `netstack.py`, when asked for).
  "host" names the harness's side (the bridge's address and the proxies').
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections import defaultdict
from pathlib import Path

from .netns import NetError, Network, run

HOST = "host"
TABLE = "nemesis"
PROXY_FIRST = 200


class DelayProxy:
    """The delaying proxy process (`delayproxy.py`), told what to do on its stdin."""

    def __init__(self) -> None:
        self.process: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> DelayProxy:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, str(Path(__file__).with_name("delayproxy.py")),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        return self

    async def tell(self, **command: object) -> None:
        import json

        assert self.process is not None and self.process.stdin is not None and self.process.stdout is not None
        async with self._lock:
            self.process.stdin.write((json.dumps(command) + "\n").encode())
            await self.process.stdin.drain()
            answer = (await asyncio.wait_for(self.process.stdout.readline(), 10)).decode().strip()
        if answer != "ok":
            raise NetError(f"delay proxy: {answer or 'exited'}")

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            await self.process.wait()


class Nemesis:
    def __init__(self, net: Network, proxy: DelayProxy | None = None) -> None:
        self.net, self.proxy = net, proxy
        self.cut: set[tuple[str, str]] = set()
        """(a, b): nothing a sends reaches b."""
        self.lossy: dict[str, int] = {}
        self.slow: dict[tuple[str, str], int] = {}
        self.proxied: dict[str, str] = {}
        """node -> the proxy address its peers reach it on."""
        self._flaps: set[asyncio.Task[None]] = set()

    # -- addresses -------------------------------------------------------------------------------

    def names(self) -> list[str]:
        return [*self.net.nodes, HOST]

    def addresses(self, name: str) -> set[str]:
        if name == HOST:
            return {self.net.host_ip}
        own = {self.net.nodes[name].ip}
        return own | ({self.proxied[name]} if name in self.proxied else set())

    async def proxy_for(self, name: str, port: int) -> str:
        """An address on the host side whose `port` leads to `name`'s `port` through the delay
        proxy (peers that dial it can be slowed); the same address for each port of a node."""
        assert self.proxy is not None, "latency needs a DelayProxy"
        address = self.proxied.get(name)
        if address is None:
            address = self.net.address(PROXY_FIRST + len(self.proxied))
            await run("ip", "addr", "add", f"{address}/32", "dev", self.net.bridge)
            self.proxied[name] = address
        await self.proxy.tell(listen=[address, port, self.net.nodes[name].ip, port])
        return address

    # -- faults ----------------------------------------------------------------------------------

    async def isolate(self, name: str) -> None:
        """Nothing in or out of `name`: the others, the harness and the proxies."""
        others = [n for n in self.names() if n != name]
        await self.partition([name], others)

    async def partition(self, side: list[str], other: list[str], one_way: bool = False) -> None:
        """Cut `side` from `other` (both ways; `one_way`: only what `side` sends is lost)."""
        for a in side:
            for b in other:
                self.cut.add((a, b))
                if not one_way:
                    self.cut.add((b, a))
        await self._apply({*side, *other})

    async def loss(self, name: str, percent: int) -> None:
        self.lossy[name] = percent
        await self._apply({name})

    async def latency(self, a: str, b: str, ms: int) -> None:
        """`ms` each way on the proxied links between a and b (whichever dialled)."""
        assert self.proxy is not None
        for client, target in ((a, b), (b, a)):
            if target in self.proxied:
                await self.proxy.tell(delay=[self.net.nodes[client].ip, self.proxied[target], ms])
        self.slow[(a, b)] = ms

    async def link(self, name: str, up: bool) -> None:
        await self.net.link(name, up)

    def flap(self, name: str, period_s: float, duration_s: float) -> asyncio.Task[None]:
        """`name`'s link down for `period_s`, up for `period_s`, ... for `duration_s`; up at the end."""

        async def flapping() -> None:
            try:
                for _ in range(max(1, int(duration_s / (2 * period_s)))):
                    await self.link(name, False)
                    await asyncio.sleep(period_s)
                    await self.link(name, True)
                    await asyncio.sleep(period_s)
            finally:
                with contextlib.suppress(NetError):
                    await self.link(name, True)

        task = asyncio.create_task(flapping())
        self._flaps.add(task)
        task.add_done_callback(self._flaps.discard)
        return task

    async def heal(self) -> None:
        """Every fault undone: flapping stopped (links up), rules flushed, delays back to 0."""
        for task in list(self._flaps):
            task.cancel()
        await asyncio.gather(*self._flaps, return_exceptions=True)
        touched = {n for pair in self.cut for n in pair} | set(self.lossy)
        self.cut.clear()
        self.lossy.clear()
        await self._apply(touched)
        if self.slow and self.proxy is not None:
            await self.proxy.tell(delay=["*", "*", 0])
        self.slow.clear()
        for name in self.net.nodes:
            await self.net.link(name, True)

    def describe(self) -> str:
        parts = [f"{a}->{b}" for a, b in sorted(self.cut)]
        parts += [f"{n} loses {p}%" for n, p in sorted(self.lossy.items())]
        parts += [f"{a}<->{b} +{ms}ms" for (a, b), ms in sorted(self.slow.items())]
        return ", ".join(parts) or "none"

    # -- rules -----------------------------------------------------------------------------------

    def ruleset(self, name: str) -> str:
        """`name`'s namespace's whole ruleset (each namespace's ruleset is the nemesis's alone)."""
        drop_out: set[str] = set()
        drop_in: set[str] = set()
        for a, b in self.cut:
            if a == name:
                drop_out |= self.addresses(b)
            if b == name:
                drop_in |= self.addresses(a)
        drop_out.discard(self.net.nodes[name].ip)
        drop_in.discard(self.net.nodes[name].ip)
        rules: dict[str, list[str]] = defaultdict(list)
        if drop_in:
            rules["input"].append(f"ip saddr {{ {', '.join(sorted(drop_in))} }} drop")
        if drop_out:
            rules["output"].append(f"ip daddr {{ {', '.join(sorted(drop_out))} }} drop")
        if self.lossy.get(name):
            share = "" if self.lossy[name] >= 100 else f" numgen random mod 100 < {self.lossy[name]}"
            rules["input"].append(f'iifname "eth0"{share} drop')
            rules["output"].append(f'oifname "eth0"{share} drop')
        chains = "".join(
            f"  chain {hook} {{\n    type filter hook {hook} priority 0; policy accept;\n"
            + "".join(f"    {r}\n" for r in rules[hook]) + "  }\n"
            for hook in ("input", "output"))
        return f"flush ruleset\ntable inet {TABLE} {{\n{chains}}}\n"

    async def _apply(self, names: set[str]) -> None:
        await asyncio.gather(*(self.net.inside(n, "nft", self.ruleset(n)) for n in names if n != HOST))

    async def close(self) -> None:
        for task in list(self._flaps):
            task.cancel()
        await asyncio.gather(*self._flaps, return_exceptions=True)
        if self.proxy is not None:
            await self.proxy.stop()
