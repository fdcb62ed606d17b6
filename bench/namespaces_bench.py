"""What a namespace node costs (docs/benchmarks.md, "Real nodes"): the namespaces provider's create
(namespace, veth, overlays, hostname, sshd with its own host key), confirm (an SSH login checking
that key) and delete (every process, the namespace, the veth, the overlays), through
`PluginRegistry.execute`, next to the raw cost of the same kernel objects (`ip netns add` + a veth,
then `ip netns del`) in the same run. Needs root.

    .venv/bin/python bench/namespaces_bench.py [--nodes 10]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from services.provisioner.plugins import PluginRegistry
from services.provisioner.plugins.builtin.namespaces import system
from services.provisioner.plugins.testing import make_task, next_task


def p50(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.0f} ms"


async def raw(prefix: str, n: int) -> tuple[list[float], list[float]]:
    adds, dels = [], []
    for i in range(n):
        name = system.object_name(prefix, f"r{i}", interface=True)
        t0 = time.perf_counter()
        await system.run(["ip", "netns", "add", name])
        await system.run(["ip", "link", "add", name, "type", "veth", "peer", "name", "eth0", "netns", name])
        adds.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        await system.run(["ip", "netns", "del", name])
        await system.delete_link(name)
        dels.append(time.perf_counter() - t0)
    return adds, dels


async def nodes(prefix: str, n: int, work: Path) -> dict[str, list[float]]:
    fields = {"prefix": prefix, "network": "10.213.0.0/16", "base_dir": str(work / "nodes")}
    reg = PluginRegistry.discover(work_dir=work / "work")
    times: dict[str, list[float]] = {"create": [], "confirm": [], "delete": []}
    try:
        for i in range(n):
            create = make_task("create", providertype="namespaces", provider_name="ns", provider_fields=fields,
                               node_id=f"n{i}", hostname=f"n{i}.bench", automators=["shell"])
            t0 = time.perf_counter()
            created = await reg.execute(create)
            times["create"].append(time.perf_counter() - t0)
            assert created.ok, created.error
            confirm = next_task(create, created, "confirm")
            t0 = time.perf_counter()
            confirmed = await reg.execute(confirm)
            times["confirm"].append(time.perf_counter() - t0)
            assert confirmed.ok, confirmed.error
            t0 = time.perf_counter()
            deleted = await reg.execute(next_task(confirm, confirmed, "delete"))
            times["delete"].append(time.perf_counter() - t0)
            assert deleted.ok, deleted.error
    finally:
        await reg.aclose()
    return times


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10)
    args = parser.parse_args()
    refusal = system.root_refusal()
    if refusal:
        raise SystemExit(refusal)
    prefix = "b" + time.strftime("%H%M%S")[-5:]
    with tempfile.TemporaryDirectory() as tmp:
        try:
            adds, dels = await raw(prefix, args.nodes)
            times = await nodes(prefix, args.nodes, Path(tmp))
        finally:
            await system.sweep(prefix, [Path(tmp) / "nodes"])
    print(f"{args.nodes} nodes, one after another")
    print("| what | p50 | raw, same run |")
    print("|---|---|---|")
    print(f"| create: namespace, veth, lease, overlays, hostname, sshd with its own host key | {p50(times['create'])} | "
          f"`ip netns add` + veth: {p50(adds)} |")
    print(f"| confirm: SSH login checking the recorded host key, `hostname` | {p50(times['confirm'])} | |")
    print(f"| delete: every process, namespace, veth, lease, overlays, bridge | {p50(times['delete'])} | "
          f"`ip netns del` + veth: {p50(dels)} |")


if __name__ == "__main__":
    asyncio.run(main())
