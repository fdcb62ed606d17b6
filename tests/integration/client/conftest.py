"""The `stack` fixture of tests/integration/services (all four services in this test's loop),
and a way to run the `muster` command as a user does, against a real server: in this process
(tests/cli_in_process.py), or as a real process where the test says so."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest_asyncio

from contracts.catalog import Catalog, Provider
from muster.catalog.store import apply_catalog
from tests import cli_in_process

_spec = importlib.util.spec_from_file_location("_muster_services_stack", Path(__file__).parents[1] / "services" / "conftest.py")
assert _spec is not None and _spec.loader is not None
_services = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _services
_spec.loader.exec_module(_services)

stack = _services.stack
Stack = _services.Stack


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str


async def muster(url: str, *args: str, cwd: Path | None = None, timeout: float = 90, process: bool = False,
                 **more: str) -> Run:
    """`muster ARGS...` with NATS_URL set (and the environment variables `more` names), in this
    process, or as a process of its own if `process` (or `cwd`, its working directory) is given;
    waits at most `timeout` seconds."""
    env = {**os.environ, "NATS_URL": url, "COLUMNS": "200", "USER": "tester", **more}
    if not process and cwd is None:
        return Run(*await cli_in_process.run(args, env, timeout))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "muster", *args, cwd=cwd, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return Run(proc.returncode or 0, out.decode(), err.decode())


@pytest_asyncio.fixture
async def fast(stack: Any) -> Any:
    """The demo's simulated cloud without its latency: these tests are about the client."""
    quick = Provider(name="sim", providertype="simulated", provisioner={"region": "local", "latency_ms": "0-20", "failure_rate": "0"})
    await apply_catalog(stack.store, stack.tenant, Catalog(providers={"sim": quick}))
    return stack
