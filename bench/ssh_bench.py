"""Provisioner plugin benchmark: the localhost provider's SSH endpoints and the shell automator
(and, when /usr/sbin/sshd exists and we may start it, a real OpenSSH sshd for comparison).
Not a test: run it and copy the figures into docs/benchmarks.md ("## Provisioner plugins").

    .venv/bin/python bench/ssh_bench.py [--nodes 20] [--commands 200] [--tasks 100]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import getpass
import logging
import os
import platform
import socket
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncssh
import structlog

from contracts.tasks import TaskMessage, TaskOutcome
from services.provisioner.plugins import PluginRegistry
from services.provisioner.plugins.ssh import SshTarget, connect, load_private_key, resolve_key_path
from services.provisioner.plugins.testing import make_task, next_task, service_task

SSHD = Path("/usr/sbin/sshd")


def ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    p50 = statistics.median(ordered) * 1000
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000
    return f"p50 {p50:7.2f} ms   p99 {p99:7.2f} ms   (n={len(ordered)})"


async def timed(fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = await fn()
    return time.perf_counter() - start, value


async def connect_and_commands(label: str, target: SshTarget, commands: int) -> None:
    connects = []
    for _ in range(20):
        seconds, conn = await timed(lambda: connect(target))
        connects.append(seconds)
        conn.close()
        await conn.wait_closed()
    print(f"  {label:<38} connect+auth     {ms(connects)}")
    async with await connect(target) as conn:
        runs = []
        for _ in range(commands):
            seconds, result = await timed(lambda: conn.run("true"))
            assert result.exit_status == 0
            runs.append(seconds)
        print(f"  {label:<38} `true` per cmd   {ms(runs)}")
        start = time.perf_counter()
        results = await asyncio.gather(*(conn.run("true") for _ in range(commands)))
        elapsed = time.perf_counter() - start
        assert all(r.exit_status == 0 for r in results)
        print(f"  {label:<38} {commands} concurrent `true` on one connection: {commands / elapsed:7.0f} cmd/s")


def target_of(node: TaskMessage, key_dir: Path) -> SshTarget:
    auth = node.results["ssh-auth"]
    return SshTarget(
        host="127.0.0.1",
        port=node.results["ssh_port"],
        user=auth["user"],
        client_key=load_private_key(resolve_key_path(auth["identityfile"], key_dir)),
        host_keys=tuple(node.results["ssh_host_keys"].values()),
    )


async def localhost(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="muster-ssh-bench-"))
    reg = PluginRegistry.discover(work_dir=work)
    try:
        creates, confirms, nodes = [], [], []
        for i in range(args.nodes):
            create = make_task("create", providertype="localhost", provider_name="local", node_id=f"n{i}", automators=["shell"])
            seconds, created = await timed(functools.partial(reg.execute, create))
            assert created.ok, created.error
            creates.append(seconds)
            confirm = next_task(create, created, "confirm")
            seconds, confirmed = await timed(functools.partial(reg.execute, confirm))
            assert confirmed.ok, confirmed.error
            confirms.append(seconds)
            nodes.append(next_task(confirm, confirmed, "bootstrap"))
        print("localhost provider (in-process asyncssh endpoint per node)")
        print(f"  {'create (keys + endpoint start)':<38}                  {ms(creates)}")
        print(f"  {'confirm (connect + verify + pwd)':<38}                  {ms(confirms)}")
        await connect_and_commands("localhost endpoint", target_of(nodes[0], work / "keys"), args.commands)

        tasks = []
        for i in range(args.tasks):
            task = service_task(nodes[i % len(nodes)], "install", "echo $MUSTER_SERVICE > /dev/null")
            seconds, out = await timed(functools.partial(reg.execute, task))
            assert out.ok, out.error
            tasks.append(seconds)
        print(f"  {'shell automator task (sequential)':<38}                  {ms(tasks)}")
        batch = [service_task(nodes[i % len(nodes)], "install", "true") for i in range(args.tasks)]
        start = time.perf_counter()
        outs = await asyncio.gather(*(reg.execute(t) for t in batch))
        elapsed = time.perf_counter() - start
        assert all(o.ok for o in outs), [o.error for o in outs if not o.ok][:3]
        print(f"  shell automator, {args.tasks} tasks at once over {len(nodes)} nodes: {args.tasks / elapsed:7.0f} tasks/s")
        deletes = []
        for node in nodes:
            delete = next_task(node, TaskOutcome(ok=True), "delete")
            seconds, out = await timed(functools.partial(reg.execute, delete))
            assert out.ok, out.error
            deletes.append(seconds)
        print(f"  {'delete (stop endpoint, remove dir)':<38}                  {ms(deletes)}")
    finally:
        await reg.aclose()


@contextlib.asynccontextmanager
async def real_sshd() -> AsyncIterator[SshTarget | None]:
    if not SSHD.exists():
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="muster-sshd-bench-") as tmp:
        d = Path(tmp)
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        host_key, client_key = (asyncssh.generate_private_key("ssh-ed25519") for _ in range(2))
        (d / "host").write_bytes(host_key.export_private_key())
        (d / "host").chmod(0o600)
        (d / "authorized_keys").write_bytes(client_key.export_public_key())
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        (d / "sshd_config").write_text(
            f"ListenAddress 127.0.0.1\nPort {port}\nHostKey {d}/host\nPidFile {d}/sshd.pid\n"
            f"AuthorizedKeysFile {d}/authorized_keys\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "UsePAM no\nPermitRootLogin prohibit-password\nStrictModes no\nMaxStartups 100\nMaxSessions 100\n"
        )
        proc = await asyncio.create_subprocess_exec(
            str(SSHD), "-D", "-e", "-f", str(d / "sshd_config"),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert proc.stderr is not None

        async def listening() -> None:
            assert proc.stderr is not None
            async for line in proc.stderr:
                if b"Server listening on" in line:
                    return
            raise RuntimeError("sshd exited")

        drain: asyncio.Task[None] | None = None
        try:
            await asyncio.wait_for(listening(), 10)

            async def swallow() -> None:
                assert proc.stderr is not None
                async for _ in proc.stderr:
                    pass

            drain = asyncio.ensure_future(swallow())
            key_line = host_key.export_public_key().decode().strip()
            yield SshTarget("127.0.0.1", port, getpass.getuser(), client_key, (key_line,))
        finally:
            if proc.returncode is None:
                proc.terminate()
                await proc.wait()
            if drain is not None:
                await drain


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--commands", type=int, default=200)
    parser.add_argument("--tasks", type=int, default=100)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    print(f"{platform.node()} · {platform.processor() or platform.machine()} · {os.cpu_count()} CPUs · "
          f"Python {platform.python_version()} · asyncssh {asyncssh.__version__}")  # fmt: skip
    await localhost(args)
    async with real_sshd() as target:
        if target is None:
            print("OpenSSH sshd: /usr/sbin/sshd not found, skipped")
        else:
            print("OpenSSH sshd (Debian openssh-server, 127.0.0.1)")
            await connect_and_commands("sshd", target, min(args.commands, 100))


if __name__ == "__main__":
    asyncio.run(main())
